//! The PostgreSQL test tier: a dev-dependency of the crates whose tests need a server, and the
//! soak's local-cluster provider ([`cluster`]); also the API's bad-input table ([`hostile`]),
//! shared by the broker's tests and the soak.
//!
//! One throwaway cluster per test process, started on first use from the installed server
//! binaries ([`cluster`]) and stopped and removed at process exit. It holds a template database
//! with the schema applied once; every [`TestDb`] is a fresh database cloned from it, so tests run
//! in parallel and share nothing. `QUEEN_TEST_DATABASE_URL` points the tier at an existing server
//! instead (the user needs CREATEDB); the databases it creates there are dropped at exit.
//!
//! When the tier cannot start, every test that asks for a database fails with the reason: what was
//! searched, what failed, the end of the server's log.

#![allow(unsafe_code)] // atexit, to stop the cluster when the test process ends.
#![warn(missing_docs, unreachable_pub)]

pub mod cluster;
pub mod hostile;

use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection, PgPool};

use self::cluster::{ClusterOptions, LocalCluster};

/// Environment variable naming an existing server for the tier.
pub const DATABASE_URL_ENV: &str = "QUEEN_TEST_DATABASE_URL";

/// Connections in a [`TestDb`]'s default pool.
const DEFAULT_POOL_SIZE: u32 = 8;

struct Tier {
    /// Connects to the server's maintenance database, for CREATE/DROP DATABASE.
    admin: PgConnectOptions,
    template: String,
    external: bool,
}

static TIER: OnceLock<Result<Tier, String>> = OnceLock::new();
static CLUSTER: Mutex<Option<LocalCluster>> = Mutex::new(None);
static CREATED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A database of its own for one test, with the schema applied.
#[derive(Debug)]
pub struct TestDb {
    /// A pool of 8 connections on it.
    pub pool: PgPool,
    /// Its name on the server.
    pub name: String,
    options: PgConnectOptions,
}

impl TestDb {
    /// Clones the template into a new database and opens a pool on it.
    ///
    /// Panics with the tier's start-up error when the tier cannot start.
    pub async fn new() -> TestDb {
        match Self::try_new().await {
            Ok(db) => db,
            Err(reason) => panic!("the PostgreSQL test tier is unavailable: {reason}"),
        }
    }

    /// A database with nothing in it (cloned from `template0`), to apply the schema to by hand.
    pub async fn empty() -> TestDb {
        match Self::create("template0").await {
            Ok(db) => db,
            Err(reason) => panic!("the PostgreSQL test tier is unavailable: {reason}"),
        }
    }

    /// As [`TestDb::new`], with the tier's start-up error instead of a panic.
    pub async fn try_new() -> Result<TestDb, String> {
        let tier = tier()?;
        Self::create(&tier.template).await
    }

    async fn create(template: &str) -> Result<TestDb, String> {
        let tier = tier()?;
        let name = format!(
            "{}_{}",
            tier.template.replace("template", "t"),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = tier
            .admin
            .connect()
            .await
            .map_err(|e| format!("cannot connect to the test server: {e}"))?;
        create_database(&mut admin, &name, Some(template))
            .await
            .map_err(|e| format!("cannot create test database {name}: {e}"))?;
        let _ = admin.close().await;
        if tier.external {
            CREATED.lock().expect("tier bookkeeping").push(name.clone());
        }
        let options = tier.admin.clone().database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_POOL_SIZE)
            .connect_with(options.clone())
            .await
            .map_err(|e| format!("cannot open a pool on {name}: {e}"))?;
        Ok(TestDb {
            pool,
            name,
            options,
        })
    }

    /// Options that connect to this database (to build more pools, e.g. one per broker).
    pub fn options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// A URL that connects to this database, for processes started by a test.
    pub fn url(&self) -> String {
        self.options.to_url_lossy().to_string()
    }

    /// A new pool of `size` connections on this database.
    pub async fn pool_of(&self, size: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(size)
            .connect_with(self.options())
            .await
            .unwrap_or_else(|e| panic!("cannot open a pool on {}: {e}", self.name))
    }

    /// One connection outside any pool (to hold a transaction open across awaits).
    pub async fn connection(&self) -> PgConnection {
        self.options()
            .connect()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.name))
    }
}

fn tier() -> Result<&'static Tier, String> {
    TIER.get_or_init(|| {
        // Start-up runs on threads of its own: the caller is usually inside a tokio runtime,
        // where blocking on another runtime would panic.
        std::thread::spawn(start_tier)
            .join()
            .unwrap_or_else(|_| Err("the test tier's start-up panicked".to_owned()))
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn start_tier() -> Result<Tier, String> {
    let (admin, external) = match std::env::var(DATABASE_URL_ENV) {
        Ok(url) => {
            let options = PgConnectOptions::from_str(&url)
                .map_err(|e| format!("{DATABASE_URL_ENV}={url:?} is not a PostgreSQL URL: {e}"))?;
            (options, true)
        }
        Err(_) => (start_local_cluster()?, false),
    };
    let template = format!(
        "queen_template_{}_{:08x}",
        std::process::id(),
        queen_sweeper::clock::random_u64() as u32
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a runtime for the tier: {e}"))?;
    runtime.block_on(create_template(&admin, &template))?;
    register_exit_hook();
    Ok(Tier {
        admin,
        template,
        external,
    })
}

/// Starts the cluster on a thread that then lives for the rest of the process: the server is
/// bound to its starting thread by PR_SET_PDEATHSIG, so it dies with this process even when the
/// process is killed and the exit hook never runs.
fn start_local_cluster() -> Result<PgConnectOptions, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("queen-test-cluster".into())
        .spawn(move || {
            let started = LocalCluster::start(&ClusterOptions::default());
            let ok = started.is_ok();
            let _ = sender.send(started);
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .map_err(|e| format!("cannot spawn the cluster thread: {e}"))?;
    let cluster = receiver
        .recv()
        .map_err(|_| "the cluster thread died".to_owned())??;
    let url = cluster.socket_url("postgres");
    *CLUSTER.lock().expect("cluster slot") = Some(cluster);
    PgConnectOptions::from_str(&url).map_err(|e| format!("bad cluster URL {url}: {e}"))
}

async fn create_template(admin: &PgConnectOptions, template: &str) -> Result<(), String> {
    let mut connection = admin
        .connect()
        .await
        .map_err(|e| format!("cannot connect to the test server: {e}"))?;
    create_database(&mut connection, template, None)
        .await
        .map_err(|e| {
            format!(
                "cannot create the template database {template} (does the user have CREATEDB?): {e}"
            )
        })?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(admin.clone().database(template))
        .await
        .map_err(|e| format!("cannot connect to {template}: {e}"))?;
    queen_sweeper::apply_schema(&pool)
        .await
        .map_err(|e| format!("cannot apply the schema to {template}: {e}"))?;
    // CREATE DATABASE ... TEMPLATE needs the template to have no connections.
    pool.close().await;
    let _ = connection.close().await;
    Ok(())
}

fn register_exit_hook() {
    extern "C" fn at_exit() {
        let cluster = CLUSTER.lock().ok().and_then(|mut slot| slot.take());
        if let Some(mut cluster) = cluster {
            cluster.stop();
            return;
        }
        // An external server: drop what this process created, from a thread of its own (the
        // main thread is tearing down).
        let _ = std::thread::spawn(drop_external_databases).join();
    }
    // SAFETY: registering a plain extern "C" function with no captured state.
    unsafe {
        libc::atexit(at_exit);
    }
}

fn drop_external_databases() {
    let Some(Ok(tier)) = TIER.get() else {
        return;
    };
    let mut names = CREATED
        .lock()
        .map(|names| names.clone())
        .unwrap_or_default();
    names.push(tier.template.clone());
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let Ok(mut connection) = tier.admin.connect().await else {
            eprintln!(
                "queen test tier: could not reconnect to drop {} test databases",
                names.len()
            );
            return;
        };
        for name in names {
            if let Err(error) = drop_database(&mut connection, &name).await {
                eprintln!("queen test tier: could not drop {name}: {error}");
            }
        }
    });
}

/// Creates database `name` (from `template`, or the server's default) over an administrative
/// connection. Names are quoted; a name with a double quote is refused.
pub async fn create_database(
    admin: &mut PgConnection,
    name: &str,
    template: Option<&str>,
) -> Result<(), sqlx::Error> {
    let template = template
        .map(|t| format!(" TEMPLATE {}", quoted(t)))
        .unwrap_or_default();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE DATABASE {}{template}",
        quoted(name)
    )))
    .execute(admin)
    .await
    .map(|_| ())
}

/// Drops database `name` if it exists, closing its sessions first.
pub async fn drop_database(admin: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quoted(name)
    )))
    .execute(admin)
    .await
    .map(|_| ())
}

/// An identifier in double quotes. Test and soak database names are made by this code, so a
/// double quote in one is a bug.
fn quoted(name: &str) -> String {
    assert!(
        !name.contains('"'),
        "database name {name:?} has a double quote"
    );
    format!("\"{name}\"")
}
