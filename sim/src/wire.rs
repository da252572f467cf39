//! The simulated wire between brokers and the modelled database: one request, one response,
//! each a length-prefixed JSON frame on a turmoil TCP stream. A connection carries at most one
//! open schedule transaction, like a PostgreSQL session.

use queen_sweeper::{ApplyResult, TimerOp};
use queen_sweeper::{
    ClaimedTimer, ExpireStep, FailOutcome, FailRow, FireCall, Probe, ProbeRequest, SegmentOutcome,
    Switch, SwitchStates, TakeRequest, Taken, TimerRef, UsageStep,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame accepted (a fire call of 8 MiB of keys would never get near it).
pub const MAX_FRAME_BYTES: u32 = 64 * 1024 * 1024;

/// The database port inside the simulated network.
pub const DB_PORT: u16 = 5432;
/// Where a broker's schedule seam listens (its HTTP handler, in production).
pub const SEAM_PORT: u16 = 8080;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    Probe(ProbeRequest),
    Claim {
        shards: Vec<u8>,
        lease_ms: u64,
        max_rows: u32,
        per_tenant: u32,
        fair_tenants: u32,
        fair_after: Option<String>,
    },
    Take(TakeRequest),
    Fire {
        call: FireCall,
    },
    Fail {
        rows: Vec<FailRow>,
        error: String,
        transient: bool,
        max_attempts: u32,
    },
    Dlq {
        rows: Vec<TimerRef>,
    },
    KvExpire {
        shards: Vec<u8>,
        max_rows: u32,
    },
    Usage {
        after: Option<String>,
        max_tenants: u32,
    },
    ReadSwitches,
    WriteSwitch {
        switch: Switch,
        enabled: bool,
    },
    /// Applies schedule operations inside this connection's open transaction (opening it).
    Apply {
        tenant: String,
        ops: Vec<TimerOp>,
    },
    /// Opens a transaction on this connection (an apply opens one itself); a KV put joins it.
    Begin,
    Commit,
    Rollback,
    /// A producer's push of `count` messages of `payload_bytes` each.
    Push {
        tenant: String,
        queue: String,
        partition: String,
        count: u32,
        payload_bytes: u64,
        txn_prefix: String,
    },
    /// Inside this connection's open transaction when there is one, else committed at once.
    KvPut {
        tenant: String,
        namespace: String,
        key: String,
        ttl_ms: Option<u64>,
        /// The length of the value's JSON text (PostgreSQL's `octet_length(value)`).
        bytes: u64,
    },
}

impl Request {
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Probe(_) => "probe",
            Request::Claim { .. } => "claim",
            Request::Take(_) => "take",
            Request::Fire { .. } => "fire",
            Request::Fail { .. } => "fail",
            Request::Dlq { .. } => "dlq",
            Request::KvExpire { .. } => "prune",
            Request::Usage { .. } => "usage",
            Request::ReadSwitches | Request::WriteSwitch { .. } => "switches",
            Request::Apply { .. } => "apply",
            Request::Begin => "begin",
            Request::Commit => "commit",
            Request::Rollback => "rollback",
            Request::Push { .. } => "push",
            Request::KvPut { .. } => "kv_put",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Response {
    Probe(Probe),
    Claimed {
        rows: Vec<ClaimedTimer>,
        /// The last tenant the fairness round visited.
        fair_next: Option<String>,
    },
    Taken(Taken),
    Fired(Vec<SegmentOutcome>),
    Failed(Vec<FailOutcome>),
    Count(u64),
    Expire(ExpireStep),
    Usage(UsageStep),
    Switches(SwitchStates),
    Applied(Vec<ApplyResult>),
    Pushed {
        first_offset: u64,
    },
    Done,
    Error {
        sqlstate: Option<String>,
        message: String,
    },
}

/// A schedule request from a load host to a broker's seam.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleRequest {
    pub tenant: String,
    pub ops: Vec<TimerOp>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ScheduleResponse {
    Applied {
        results: Vec<ApplyResult>,
        woke: bool,
    },
    Failed {
        message: String,
    },
}

pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    value: &T,
) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    writer.write_all(&len.to_be_bytes()).await?;
    writer.write_all(&bytes).await?;
    writer.flush().await
}

pub async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    reader: &mut R,
) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes is over the limit"
        )));
    }
    let mut bytes = vec![0u8; len as usize];
    reader.read_exact(&mut bytes).await?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}
