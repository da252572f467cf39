//! The model's tables: committed rows, the index the sweeper scans, and the row locks of
//! in-flight transactions. Times are simulated microseconds since the start of the run.

use std::collections::{BTreeMap, BTreeSet};

use queen_sweeper::{Destination, SwitchStates, stable_shard};
use serde::Serialize;
use uuid::Uuid;

/// Simulated microseconds since the run started.
pub type Us = u64;

/// Primary key of a timer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TimerKey {
    pub tenant: String,
    pub queue: String,
    pub key: String,
}

impl TimerKey {
    /// The shard of a key. The model's hash is not PostgreSQL's `hashtextextended`; only the
    /// property matters: fixed, 64 shards, spread evenly.
    pub fn shard(&self) -> u8 {
        stable_shard(&self.key)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimerRow {
    pub partition: String,
    pub deliver_at: Us,
    pub txn: String,
    pub message_id: Uuid,
    pub payload_bytes: u64,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub claimed_until: Option<Us>,
    pub token: Option<Uuid>,
}

impl TimerRow {
    /// The later of delivery and the current lease or backoff.
    pub fn visible_at(&self) -> Us {
        self.deliver_at.max(self.claimed_until.unwrap_or(0))
    }

    /// In somebody's hands: a token with a live lease.
    pub fn held_at(&self, now: Us) -> bool {
        self.token.is_some() && self.claimed_until.is_some_and(|until| until > now)
    }
}

/// Who appended a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    Push,
    Fire,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub partition_id: u64,
    pub offset: u64,
    pub destination: Destination,
    pub txn: String,
    pub message_id: Uuid,
    pub created_at: Us,
    pub source: Source,
    /// The host whose call appended it.
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Partition {
    pub id: u64,
    /// Offsets taken so far (the next one is `appended`).
    pub appended: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct KvKey {
    pub tenant: String,
    pub namespace: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvRow {
    pub expires_at: Option<Us>,
    /// The length of the value's JSON text, stored as sent (`octet_length(value)`), which the
    /// rollup counts with the namespace and the key.
    pub bytes: u64,
}

/// The row lock an open transaction's put holds on a KV row, with the version it wrote: as in
/// PostgreSQL, the new version is invisible to every other statement until the commit, and the
/// lock lasts until the commit or the rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvLock {
    pub txn: u64,
    pub pending: KvRow,
}

/// A KV row the prune removed, with the instants the checker needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub key: KvKey,
    /// The expiry of the row's newest version: the one an open transaction's put was about to
    /// commit when a transaction held the row (the prune took that version with it), else the
    /// committed one. `None`: it never expires.
    pub expires_at: Option<Us>,
    pub pruned_at: Us,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    pub key: TimerKey,
    pub txn: String,
    pub payload_bytes: u64,
    pub attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Usage {
    pub kv_rows: u64,
    pub kv_bytes: u64,
    pub timer_rows: u64,
    pub timer_bytes: u64,
}

/// One database call, as the database saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryEvent {
    pub at: Us,
    pub host: String,
    pub kind: &'static str,
}

/// One fire segment's result, as the database decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentEvent {
    pub at: Us,
    pub host: String,
    pub fired: bool,
    pub timers: u32,
}

/// Everything the model holds.
#[derive(Debug, Default)]
pub struct Tables {
    pub timers: BTreeMap<TimerKey, TimerRow>,
    /// (shard, visible_at, key): the model of `log_timers_shard_visible_idx`.
    pub index: BTreeSet<(u8, Us, TimerKey)>,
    /// Row locks of in-flight transactions: key → transaction id.
    pub row_locks: BTreeMap<TimerKey, u64>,
    pub partitions: BTreeMap<Destination, Partition>,
    pub messages: Vec<Message>,
    pub dlq: Vec<DeadLetter>,
    pub kv: BTreeMap<KvKey, KvRow>,
    /// (shard, expires_at, key) for rows that can expire.
    pub kv_index: BTreeSet<(u8, Us, KvKey)>,
    /// Row locks of open transactions on KV rows (their puts), with the versions they wrote.
    pub kv_locks: BTreeMap<KvKey, KvLock>,
    pub pruned: Vec<Pruned>,
    /// Expired rows a prune found under another transaction's lock and skipped (SKIP LOCKED).
    pub kv_skipped_locked: u64,
    pub usage: BTreeMap<String, Usage>,
    pub switches: Option<SwitchStates>,
    pub next_token: u128,
    pub next_txn: u64,
    pub queries: Vec<QueryEvent>,
    pub segments: Vec<SegmentEvent>,
    pub wal_bytes: u64,
}

impl Tables {
    pub fn switches(&self) -> SwitchStates {
        self.switches.unwrap_or(SwitchStates {
            schedule_enabled: true,
            fire_enabled: true,
        })
    }

    pub fn new_txn(&mut self) -> u64 {
        self.next_txn += 1;
        self.next_txn
    }

    /// A fresh claim token. Deterministic: a counter, not randomness (uniqueness is all the
    /// contract needs).
    pub fn new_token(&mut self) -> Uuid {
        self.next_token += 1;
        Uuid::from_u128(0x5157_0000_0000_0000_0000_0000_0000_0000 | self.next_token)
    }

    pub fn insert_timer(&mut self, key: TimerKey, row: TimerRow) {
        if let Some(old) = self.timers.get(&key) {
            self.index
                .remove(&(key.shard(), old.visible_at(), key.clone()));
        }
        self.index
            .insert((key.shard(), row.visible_at(), key.clone()));
        self.timers.insert(key, row);
    }

    pub fn remove_timer(&mut self, key: &TimerKey) -> Option<TimerRow> {
        let row = self.timers.remove(key)?;
        self.index
            .remove(&(key.shard(), row.visible_at(), key.clone()));
        Some(row)
    }

    /// Changes a committed timer row in place, keeping the index right.
    pub fn update_timer(&mut self, key: &TimerKey, change: impl FnOnce(&mut TimerRow)) {
        if let Some(mut row) = self.timers.get(key).cloned() {
            change(&mut row);
            self.insert_timer(key.clone(), row);
        }
    }

    pub fn locked_by_other(&self, key: &TimerKey, txn: u64) -> bool {
        self.row_locks.get(key).is_some_and(|&holder| holder != txn)
    }

    /// Ends transaction `txn` without committing: its timer and KV row locks go, and with them
    /// the KV versions it wrote.
    pub fn release_locks(&mut self, txn: u64) {
        self.row_locks.retain(|_, holder| *holder != txn);
        self.kv_locks.retain(|_, lock| lock.txn != txn);
    }

    /// Whether a transaction other than `txn` holds KV row `key` (`txn` 0, an autocommitted statement: any transaction).
    pub fn kv_locked_by_other(&self, key: &KvKey, txn: u64) -> bool {
        self.kv_locks.get(key).is_some_and(|lock| lock.txn != txn)
    }

    /// Commits the KV versions transaction `txn` wrote and releases their locks.
    pub fn commit_kv(&mut self, txn: u64) {
        let ours: Vec<KvKey> = self
            .kv_locks
            .iter()
            .filter(|(_, lock)| lock.txn == txn)
            .map(|(key, _)| key.clone())
            .collect();
        for key in ours {
            let lock = self.kv_locks.remove(&key).expect("listed above");
            self.put_kv(key, lock.pending);
        }
    }

    /// Deletes KV row `key` for the prune at `now` and records it: the committed row, and the
    /// version an open transaction wrote if one holds it (only a prune that ignores locks gets
    /// there; that put's commit then has nothing to install). False when there was no row.
    pub fn prune_kv(&mut self, key: &KvKey, now: Us) -> bool {
        let Some(committed) = self.remove_kv(key) else {
            return false;
        };
        let pending = self.kv_locks.remove(key).map(|lock| lock.pending);
        let newest = pending.unwrap_or(committed);
        self.pruned.push(Pruned {
            key: key.clone(),
            expires_at: newest.expires_at,
            pruned_at: now,
        });
        true
    }

    pub fn partition_id(&mut self, destination: &Destination) -> u64 {
        let next = self.partitions.len() as u64 + 1;
        self.partitions
            .entry(destination.clone())
            .or_insert(Partition {
                id: next,
                appended: 0,
            })
            .id
    }

    /// Appends messages to a partition (the caller holds its lock). Returns the first offset.
    pub fn append(
        &mut self,
        destination: &Destination,
        entries: Vec<(String, Uuid)>,
        at: Us,
        source: Source,
        by: &str,
    ) -> u64 {
        self.partition_id(destination);
        let partition = self.partitions.get_mut(destination).expect("just ensured");
        let first = partition.appended;
        let id = partition.id;
        partition.appended += entries.len() as u64;
        for (i, (txn, message_id)) in entries.into_iter().enumerate() {
            self.messages.push(Message {
                partition_id: id,
                offset: first + i as u64,
                destination: destination.clone(),
                txn,
                message_id,
                created_at: at,
                source,
                by: by.to_owned(),
            });
        }
        first
    }

    pub fn put_kv(&mut self, key: KvKey, row: KvRow) {
        self.remove_kv(&key);
        if let Some(expires_at) = row.expires_at {
            self.kv_index
                .insert((stable_shard(&key.key), expires_at, key.clone()));
        }
        self.kv.insert(key, row);
    }

    pub fn remove_kv(&mut self, key: &KvKey) -> Option<KvRow> {
        let row = self.kv.remove(key)?;
        if let Some(expires_at) = row.expires_at {
            self.kv_index
                .remove(&(stable_shard(&key.key), expires_at, key.clone()));
        }
        Some(row)
    }

    pub fn record_query(&mut self, at: Us, host: &str, kind: &'static str) {
        self.queries.push(QueryEvent {
            at,
            host: host.to_owned(),
            kind,
        });
    }
}
