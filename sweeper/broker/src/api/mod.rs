//! The HTTP API of `queen-sweeper serve` (axum): JSON in and out, one broker per process, beside
//! the sweeper it wakes.
//!
//! | file | owns |
//! |---|---|
//! | this one | the route table ([`ROUTES`], also checked against `sweeper/openapi.json`) and the router |
//! | [`server`] | serving, and the graceful shutdown: stop accepting, finish what is in flight |
//! | [`unparsed`] | hyper's own answers to requests it cannot parse, rewritten in the documented shape |
//! | [`auth`] | bearer tokens granted to tenants, checked before anything else of a request; whether the API may listen open |
//! | [`guard`] | the body read (bounded in bytes and time), then the in-flight limit and the request deadline, in front of every `/api/v1` route |
//! | [`timers`] | schedule / reschedule / cancel through the seam; peek and list |
//! | [`ops`] | the wire form of a timer batch and every check on it (pure) |
//! | [`kv`] | put with TTL, get, delete |
//! | [`messages`] | reading fired messages from an offset |
//! | [`system`] | the kill switches, `/healthz`, `/metrics` |
//! | [`health`] | what the API knows of its database between calls: refusing at once while it is down |
//! | [`input`] | tenant header, names, JSON body and query parsing (pure) |
//! | [`views`] | how rows look in answers (pure) |
//! | [`errors`] | refusals → status, code, `Retry-After` |
//! | [`config`] | every limit, its default and its validation |
//! | [`metrics`] | the API's series |
//!
//! The database is reached only through [`crate::queries`], on a pool of the API's own.
//! The tenant of a request is the `x-queen-tenant` header, `default` without it. With tokens
//! ([`auth`]) a tenant's token may name only its own tenant, and a request without the header
//! acts as the token's tenant.

pub mod auth;
pub mod config;
pub mod errors;
pub mod guard;
pub mod health;
pub mod input;
pub mod kv;
pub mod messages;
pub mod metrics;
pub mod ops;
pub mod server;
pub mod system;
pub mod timers;
pub mod unparsed;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{MethodFilter, on};
use tokio::sync::Semaphore;

use self::auth::Auth;
use self::config::ApiConfig;
use self::errors::ApiError;
use self::health::DbHealth;
use self::metrics::ApiMetrics;
use crate::queries::PgApi;
use queen_sweeper::{Admission, Metrics, Seam, Switches};

/// One route of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    /// The path template, in axum's and OpenAPI's shared `{name}` syntax.
    pub path: &'static str,
    /// Behind the in-flight limit and the request deadline ([`guard`]); `/metrics` and `/healthz`
    /// are not, so they answer while the API is saturated.
    pub guarded: bool,
}

/// Builds [`ROUTES`] and the router from one table, so the two cannot disagree.
macro_rules! route_table {
    (
        guarded { $($gm:ident $gp:literal => $gh:path;)* }
        open { $($om:ident $op:literal => $oh:path;)* }
    ) => {
        /// Every route the server answers, in the order of `sweeper/openapi.json`.
        pub const ROUTES: &[Route] = &[
            $(Route { method: stringify!($gm), path: $gp, guarded: true },)*
            $(Route { method: stringify!($om), path: $op, guarded: false },)*
        ];

        fn guarded_routes() -> Router<ApiState> {
            Router::new()$(.route($gp, on(MethodFilter::$gm, $gh)))*
        }

        fn open_routes() -> Router<ApiState> {
            Router::new()$(.route($op, on(MethodFilter::$om, $oh)))*
        }
    };
}

route_table! {
    guarded {
        POST "/api/v1/timers" => timers::batch;
        GET "/api/v1/timers/{queue}" => timers::list;
        GET "/api/v1/timers/{queue}/{timerKey}" => timers::peek;
        DELETE "/api/v1/timers/{queue}/{timerKey}" => timers::cancel;
        PUT "/api/v1/kv/{namespace}/{key}" => kv::put;
        GET "/api/v1/kv/{namespace}/{key}" => kv::get;
        DELETE "/api/v1/kv/{namespace}/{key}" => kv::delete;
        GET "/api/v1/messages/{queue}" => messages::read;
        GET "/api/v1/system/switches" => system::get_switches;
        POST "/api/v1/system/switches" => system::set_switches;
    }
    open {
        GET "/metrics" => system::metrics;
        GET "/healthz" => system::healthz;
    }
}

/// Everything a handler needs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: PgApi,
    seam: Seam,
    switches: Switches,
    admission: Admission,
    sweeper_metrics: Metrics,
    metrics: ApiMetrics,
    health: DbHealth,
    limits: ApiConfig,
    auth: Auth,
    in_flight: Arc<Semaphore>,
}

/// The broker's parts the API works with.
#[derive(Debug)]
pub struct Parts {
    pub db: PgApi,
    /// The seam that rings this broker's sweeper ([`queen_sweeper::Sweeper::seam`]).
    pub seam: Seam,
    /// The sweeper's switches ([`queen_sweeper::Sweeper::switches`]).
    pub switches: Switches,
    /// Lanes for the API's switch reads and writes, which take a maintenance slot before their
    /// connection. Apart from the sweeper's lanes: an operator polling the switches must never
    /// hold the slot the fire is waiting for.
    pub admission: Admission,
    pub sweeper_metrics: Metrics,
    pub limits: ApiConfig,
    /// Who may call ([`auth`]).
    pub auth: Auth,
}

impl ApiState {
    pub fn new(parts: Parts) -> ApiState {
        let slots = parts.limits.max_in_flight as usize;
        let metrics = ApiMetrics::new();
        let health = DbHealth::new(parts.db.clone(), metrics.database_up.clone());
        ApiState {
            inner: Arc::new(Inner {
                db: parts.db,
                seam: parts.seam,
                switches: parts.switches,
                admission: parts.admission,
                sweeper_metrics: parts.sweeper_metrics,
                metrics,
                health,
                limits: parts.limits,
                auth: parts.auth,
                in_flight: Arc::new(Semaphore::new(slots)),
            }),
        }
    }

    pub fn limits(&self) -> &ApiConfig {
        &self.inner.limits
    }
}

/// The whole server: the routes of [`ROUTES`], their guards, the body limit, the fallbacks.
pub fn router(state: ApiState) -> Router {
    let body_limit = usize::try_from(state.inner.limits.max_body_bytes).unwrap_or(usize::MAX);
    // The last layer added runs first: the token is checked before the body is read, and the
    // body is read before the slot is taken.
    let guarded = guarded_routes()
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::admit,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::read_body,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let open = open_routes().route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::authenticate_monitoring,
    ));
    guarded
        .merge(open)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::count,
        ))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn(guard::http_limits))
        .with_state(state)
}

/// A path no route matches. An empty segment under `/api/v1/` is the caller's empty name, said
/// as such: `/api/v1/kv/ns/` is a key left out, not a route that does not exist.
async fn no_route(method: Method, uri: Uri) -> impl IntoResponse {
    let path = uri.path();
    let empty_segment =
        path.starts_with("/api/v1/") && (path.ends_with('/') || path.contains("//"));
    if empty_segment {
        return ApiError::bad_request(
            "empty_name",
            format!("{method} {path}: a queue, timer key, namespace or key in the path is empty"),
        );
    }
    ApiError::not_found(
        "no_route",
        format!("no route {method} {path}; see sweeper/broker/openapi.json"),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> impl IntoResponse {
    let allowed: Vec<&str> = ROUTES
        .iter()
        .filter(|route| path_matches(route.path, uri.path()))
        .map(|route| route.method)
        .collect();
    let mut error = ApiError::bad_request(
        "method_not_allowed",
        format!(
            "{method} is not served on {}; allowed: {}",
            uri.path(),
            allowed.join(", ")
        ),
    );
    error.status = StatusCode::METHOD_NOT_ALLOWED;
    error
}

/// Whether `path` fits `template` segment by segment (`{name}` matches any non-empty segment).
fn path_matches(template: &str, path: &str) -> bool {
    let template: Vec<&str> = template.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    template.len() == path.len()
        && template
            .iter()
            .zip(&path)
            .all(|(t, p)| (t.starts_with('{') && !p.is_empty()) || t == p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_table_has_no_duplicates_and_guards_every_api_route() {
        let mut seen = std::collections::HashSet::new();
        for route in ROUTES {
            assert!(seen.insert((route.method, route.path)), "{route:?} twice");
            assert_eq!(
                route.guarded,
                route.path.starts_with("/api/v1/"),
                "{route:?}"
            );
        }
        assert_eq!(ROUTES.len(), 12);
    }

    #[test]
    fn every_operator_route_is_a_guarded_route_of_the_table() {
        for path in auth::OPERATOR_ROUTES {
            let methods: Vec<&str> = ROUTES
                .iter()
                .filter(|route| route.path == *path && route.guarded)
                .map(|route| route.method)
                .collect();
            assert_eq!(methods, ["GET", "POST"], "{path}");
        }
    }

    #[test]
    fn a_template_matches_paths_of_its_shape_only() {
        assert!(path_matches(
            "/api/v1/kv/{namespace}/{key}",
            "/api/v1/kv/ns/k"
        ));
        assert!(!path_matches(
            "/api/v1/kv/{namespace}/{key}",
            "/api/v1/kv/ns/"
        ));
        assert!(!path_matches(
            "/api/v1/kv/{namespace}/{key}",
            "/api/v1/kv/ns"
        ));
        assert!(path_matches("/metrics", "/metrics"));
    }

    /// The checked-in OpenAPI document names exactly the routes the server has.
    #[test]
    fn the_openapi_document_lists_exactly_the_served_routes() {
        let text = include_str!("../../openapi.json");
        let document: serde_json::Value = serde_json::from_str(text).expect("openapi.json is JSON");
        assert!(
            document["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.")),
            "an OpenAPI 3 document"
        );
        let mut documented = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                if method == "parameters" {
                    continue;
                }
                assert!(
                    operation["responses"]
                        .as_object()
                        .is_some_and(|r| !r.is_empty()),
                    "{method} {path} documents no response"
                );
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|route| (route.method.to_owned(), route.path.to_owned()))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
    }
}
