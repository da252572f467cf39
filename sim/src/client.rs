//! The brokers' side of the simulated wire: [`SimStore`] implements the sweeper's
//! [`Store`] port (the real cycle runs on it unchanged), and [`SimTimerTx`] the schedule seam's
//! transaction.
//!
//! Like `PgStore`, every call has a timeout (the statement timeout plus the same grace), and a
//! connection whose call failed or timed out is dropped, never reused.

use std::time::Duration;

use queen_sweeper::{
    ApplyResult, CLIENT_GRACE, ClaimRequest, Claimed, Error, ExpireStep, FailCause, FailOutcome,
    FailRequest, FireCall, Maintenance, Probe, ProbeRequest, SegmentOutcome, ShardOrder, Slot,
    Store, Switch, SwitchStates, TakeRequest, Taken, TimerOp, TimerRef, TimerTx, UsageStep,
};
use turmoil::net::TcpStream;

use crate::wire::{DB_PORT, Request, Response, read_frame, write_frame};

#[derive(Debug)]
pub struct SimStore {
    db_host: String,
    idle: tokio::sync::Mutex<Vec<TcpStream>>,
    timeout: Duration,
}

impl SimStore {
    pub fn new(db_host: impl Into<String>, statement_timeout: Duration) -> SimStore {
        SimStore {
            db_host: db_host.into(),
            idle: tokio::sync::Mutex::new(Vec::new()),
            timeout: statement_timeout + CLIENT_GRACE,
        }
    }

    async fn connect(&self) -> Result<TcpStream, Error> {
        match tokio::time::timeout(
            self.timeout,
            TcpStream::connect((self.db_host.as_str(), DB_PORT)),
        )
        .await
        {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(Error::database(
                None,
                e.to_string(),
                "connecting to db".into(),
            )),
            Err(_) => Err(Error::Timeout {
                context: "connecting to db".into(),
                after_ms: self.timeout.as_millis() as u64,
            }),
        }
    }

    /// One request on a pooled connection.
    pub async fn call(&self, request: Request) -> Result<Response, Error> {
        let pooled = self.idle.lock().await.pop();
        let mut stream = match pooled {
            Some(stream) => stream,
            None => self.connect().await?,
        };
        let kind = request.kind();
        let response = exchange(&mut stream, &request, self.timeout, kind).await?;
        self.idle.lock().await.push(stream);
        into_result(response, kind)
    }

    /// A transaction on a connection of its own, for the schedule seam.
    pub async fn begin(&self) -> Result<SimTimerTx, Error> {
        Ok(SimTimerTx {
            stream: Some(self.connect().await?),
            timeout: self.timeout,
        })
    }
}

async fn exchange(
    stream: &mut TcpStream,
    request: &Request,
    timeout: Duration,
    kind: &'static str,
) -> Result<Response, Error> {
    let round_trip = async {
        write_frame(stream, request).await?;
        read_frame::<_, Response>(stream).await
    };
    match tokio::time::timeout(timeout, round_trip).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(Error::database(None, e.to_string(), kind.into())),
        Err(_) => Err(Error::Timeout {
            context: kind.into(),
            after_ms: timeout.as_millis() as u64,
        }),
    }
}

fn into_result(response: Response, kind: &'static str) -> Result<Response, Error> {
    match response {
        Response::Error { sqlstate, message } => {
            Err(Error::database(sqlstate, message, kind.into()))
        }
        other => Ok(other),
    }
}

fn unexpected(kind: &str, response: &Response) -> Error {
    Error::database(
        Some("XX000".into()),
        format!("unexpected answer to {kind}: {response:?}"),
        kind.into(),
    )
}

fn shards(order: &ShardOrder) -> Vec<u8> {
    order.as_slice().to_vec()
}

impl Store for SimStore {
    async fn probe(
        &self,
        _slot: &Slot<Maintenance>,
        request: &ProbeRequest,
    ) -> Result<Probe, Error> {
        match self.call(Request::Probe(request.clone())).await? {
            Response::Probe(probe) => Ok(probe),
            other => Err(unexpected("probe", &other)),
        }
    }

    async fn claim(
        &self,
        _slot: &Slot<Maintenance>,
        claim: &ClaimRequest,
    ) -> Result<Claimed, Error> {
        let (fair_tenants, fair_after) = claim
            .fair
            .as_ref()
            .map_or((0, None), |f| (f.tenants, f.after.clone()));
        let request = Request::Claim {
            shards: shards(&claim.shards),
            lease_ms: claim.lease.as_millis() as u64,
            max_rows: claim.max_rows,
            per_tenant: claim.per_tenant,
            fair_tenants,
            fair_after,
        };
        match self.call(request).await? {
            Response::Claimed { rows, fair_next } => Ok(Claimed {
                rows,
                fair_after: fair_next.filter(|_| claim.fair.is_some()),
            }),
            other => Err(unexpected("claim", &other)),
        }
    }

    async fn take(&self, _slot: &Slot<Maintenance>, request: &TakeRequest) -> Result<Taken, Error> {
        match self.call(Request::Take(request.clone())).await? {
            Response::Taken(mut taken) => {
                if request.fair.is_none() {
                    taken.fair_after = None;
                }
                Ok(taken)
            }
            other => Err(unexpected("take", &other)),
        }
    }

    async fn fire(
        &self,
        _slot: &Slot<Maintenance>,
        call: &FireCall,
    ) -> Result<Vec<SegmentOutcome>, Error> {
        match self.call(Request::Fire { call: call.clone() }).await? {
            Response::Fired(outcomes) => Ok(outcomes),
            other => Err(unexpected("fire", &other)),
        }
    }

    async fn fail(
        &self,
        _slot: &Slot<Maintenance>,
        fail: &FailRequest,
    ) -> Result<Vec<FailOutcome>, Error> {
        let request = Request::Fail {
            rows: fail.rows.clone(),
            error: fail.error.clone(),
            transient: fail.cause == FailCause::Transient,
            max_attempts: fail.max_attempts,
        };
        match self.call(request).await? {
            Response::Failed(outcomes) => Ok(outcomes),
            other => Err(unexpected("fail", &other)),
        }
    }

    async fn dlq(&self, _slot: &Slot<Maintenance>, rows: &[TimerRef]) -> Result<u64, Error> {
        match self
            .call(Request::Dlq {
                rows: rows.to_vec(),
            })
            .await?
        {
            Response::Count(n) => Ok(n),
            other => Err(unexpected("dlq", &other)),
        }
    }

    async fn kv_expire_step(
        &self,
        _slot: &Slot<Maintenance>,
        order: &ShardOrder,
        max_rows: u32,
    ) -> Result<ExpireStep, Error> {
        match self
            .call(Request::KvExpire {
                shards: shards(order),
                max_rows,
            })
            .await?
        {
            Response::Expire(step) => Ok(step),
            other => Err(unexpected("prune", &other)),
        }
    }

    async fn usage_step(
        &self,
        _slot: &Slot<Maintenance>,
        after: Option<&str>,
        max_tenants: u32,
    ) -> Result<UsageStep, Error> {
        match self
            .call(Request::Usage {
                after: after.map(str::to_owned),
                max_tenants,
            })
            .await?
        {
            Response::Usage(step) => Ok(step),
            other => Err(unexpected("usage", &other)),
        }
    }

    async fn read_switches(&self, _slot: &Slot<Maintenance>) -> Result<SwitchStates, Error> {
        match self.call(Request::ReadSwitches).await? {
            Response::Switches(states) => Ok(states),
            other => Err(unexpected("switches", &other)),
        }
    }

    async fn write_switch(
        &self,
        _slot: &Slot<Maintenance>,
        switch: Switch,
        enabled: bool,
    ) -> Result<(), Error> {
        match self.call(Request::WriteSwitch { switch, enabled }).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("switches", &other)),
        }
    }
}

/// A schedule transaction on its own connection. Dropping it without commit closes the
/// connection, which rolls the transaction back.
#[derive(Debug)]
pub struct SimTimerTx {
    stream: Option<TcpStream>,
    timeout: Duration,
}

impl SimTimerTx {
    async fn round_trip(&mut self, request: Request) -> Result<Response, Error> {
        let kind = request.kind();
        let stream = self
            .stream
            .as_mut()
            .ok_or_else(|| Error::database(None, "connection lost".into(), kind.into()))?;
        match exchange(stream, &request, self.timeout, kind).await {
            Ok(response) => into_result(response, kind),
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }
}

impl SimTimerTx {
    /// A KV put inside this transaction (the transaction wire): it holds the row's lock, and its
    /// new version stays invisible, until the commit or the rollback.
    pub async fn kv_put(
        &mut self,
        tenant: &str,
        namespace: &str,
        key: &str,
        ttl_ms: Option<u64>,
        value_bytes: u64,
    ) -> Result<(), Error> {
        let put = Request::KvPut {
            tenant: tenant.to_owned(),
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            ttl_ms,
            bytes: value_bytes,
        };
        for request in [Request::Begin, put] {
            match self.round_trip(request).await? {
                Response::Done => {}
                other => return Err(unexpected("kv_put", &other)),
            }
        }
        Ok(())
    }

    /// Rolls the transaction back: its row locks go, and what it wrote with them.
    pub async fn rollback(mut self) -> Result<(), Error> {
        match self.round_trip(Request::Rollback).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("rollback", &other)),
        }
    }
}

impl TimerTx for SimTimerTx {
    async fn apply(&mut self, tenant: &str, ops: &[TimerOp]) -> Result<Vec<ApplyResult>, Error> {
        match self
            .round_trip(Request::Apply {
                tenant: tenant.to_owned(),
                ops: ops.to_vec(),
            })
            .await?
        {
            Response::Applied(results) => Ok(results),
            other => Err(unexpected("apply", &other)),
        }
    }

    async fn commit(mut self) -> Result<(), Error> {
        match self.round_trip(Request::Commit).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("commit", &other)),
        }
    }
}
