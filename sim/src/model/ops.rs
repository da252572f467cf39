//! The model's statements as pure state transitions over [`Tables`], one per SQL function. The
//! timing (lock waits, WAL, costs) is [`super::server`]'s; here only what each call reads and
//! writes, mirroring `sql/` closely enough that the conformance suite passes on both.

use std::collections::BTreeMap;

use queen_sweeper::{ApplyResult, ApplyStatus, JsonText, Payload, TimerOp};
use queen_sweeper::{
    ClaimedTimer, Destination, ExpireStep, ExpiredKv, FailOutcome, FailRow, FireCall, Probe,
    TimerRef, UsageStep,
};
use uuid::Uuid;

use super::state::{DeadLetter, KvKey, KvLock, KvRow, Tables, TimerKey, TimerRow, Us};

/// A failed statement: SQLSTATE and message, as PostgreSQL would raise them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub sqlstate: &'static str,
    pub message: String,
}

fn invalid(message: impl Into<String>) -> SqlError {
    SqlError {
        sqlstate: "22023",
        message: message.into(),
    }
}

fn ms_between(later: Us, earlier: Us) -> u64 {
    later.saturating_sub(earlier).div_ceil(1000)
}

/// PROBE over committed rows: fixed cost per shard, not per backlog row; the switches; and, with
/// `kv_cap` > 0, the prune's alarm (`queen.sweeper_probe_v1`).
pub fn probe(t: &Tables, shards: &[u8], now: Us, cap: u32, kv_cap: u32) -> Probe {
    let mut next: Option<Us> = None;
    let mut oldest_due_deliver: Option<Us> = None;
    let mut due: u64 = 0;
    for &shard in shards {
        let mut range = t.index.range((shard, 0, min_key())..);
        if let Some((s, visible_at, key)) = range.next()
            && *s == shard
        {
            next = Some(next.map_or(*visible_at, |n| n.min(*visible_at)));
            if *visible_at <= now {
                let deliver = t.timers[key].deliver_at;
                oldest_due_deliver = Some(oldest_due_deliver.map_or(deliver, |d| d.min(deliver)));
            }
        }
        if due <= u64::from(cap) {
            due += t
                .index
                .range((shard, 0, min_key())..)
                .take_while(|(s, visible_at, _)| *s == shard && *visible_at <= now)
                .take((u64::from(cap) + 1 - due) as usize)
                .count() as u64;
        }
    }
    Probe {
        next_in_ms: next.map(|n| ms_between(n, now)),
        due: due.min(u64::from(cap)) as u32,
        due_capped: due > u64::from(cap),
        late_ms: oldest_due_deliver.map_or(0, |d| now.saturating_sub(d) / 1000),
        switches: t.switches(),
        kv_expired: (kv_cap > 0).then(|| kv_alarm(t, shards, now, u64::from(kv_cap))),
    }
}

/// The prune's alarm (`queen.kv_expired_v1`): expired rows still present, counted up to `cap`,
/// and how long the oldest has been dead.
pub fn kv_alarm(t: &Tables, shards: &[u8], now: Us, cap: u64) -> ExpiredKv {
    let mut expired = 0u64;
    let mut oldest: Option<Us> = None;
    for &shard in shards {
        let mut rows = t
            .kv_index
            .range((shard, 0, min_kv())..)
            .take_while(|(s, e, _)| *s == shard && *e <= now);
        if let Some((_, first, _)) = rows.next() {
            oldest = Some(oldest.map_or(*first, |o| o.min(*first)));
            expired += 1 + rows.take(cap as usize).count() as u64;
        }
    }
    ExpiredKv {
        expired: expired.min(cap),
        capped: expired > cap,
        lag_ms: oldest.map_or(0, |o| now.saturating_sub(o) / 1000),
    }
}

fn min_key() -> TimerKey {
    TimerKey {
        tenant: String::new(),
        queue: String::new(),
        key: String::new(),
    }
}

/// CLAIM, first half: chooses and locks rows (skipping rows other transactions lock), in rounds
/// over the shards like the SQL, among rows visible from `since` to `now` (`since` 0: all due
/// rows; the SQL's head floors). Returns the chosen keys with their pre-claim visible_at.
pub fn claim_lock(
    t: &mut Tables,
    txn: u64,
    shards: &[u8],
    (since, now): (Us, Us),
    max_rows: u32,
    per_tenant: u32,
    already: &[(TimerKey, Us)],
) -> Vec<(TimerKey, Us)> {
    let mut picked: Vec<(TimerKey, Us)> = Vec::new();
    // Rows this claim already took (the fairness round) count toward each tenant's cap.
    let mut per: BTreeMap<String, u32> = BTreeMap::new();
    for (key, _) in already {
        *per.entry(key.tenant.clone()).or_default() += 1;
    }
    let mut active: Vec<u8> = shards.to_vec();
    let mut remaining = max_rows as usize;
    while remaining > 0 && !active.is_empty() {
        let share = remaining.div_ceil(active.len());
        let mut next_active = Vec::new();
        let mut round = 0;
        for &shard in &active {
            if remaining == 0 {
                break;
            }
            let mut taken = 0;
            let candidates: Vec<(Us, TimerKey)> = t
                .index
                .range((shard, since, min_key())..)
                .take_while(|(s, visible_at, _)| *s == shard && *visible_at <= now)
                .filter(|(_, _, key)| {
                    !t.locked_by_other(key, txn) && !t.row_locks.contains_key(key)
                })
                .filter(|(_, _, key)| per.get(&key.tenant).copied().unwrap_or(0) < per_tenant)
                .take(share.min(remaining))
                .map(|(_, visible_at, key)| (*visible_at, key.clone()))
                .collect();
            for (visible_at, key) in candidates {
                let count = per.entry(key.tenant.clone()).or_default();
                if *count >= per_tenant {
                    continue;
                }
                *count += 1;
                t.row_locks.insert(key.clone(), txn);
                picked.push((key, visible_at));
                taken += 1;
                remaining -= 1;
            }
            round += taken;
            if taken >= share {
                next_active.push(shard);
            }
        }
        if round == 0 {
            break;
        }
        active = next_active;
    }
    picked
}

/// Rows of a tenant's key range the fairness round reads (the SQL's `fair_peek_rows`).
pub const FAIR_PEEK_ROWS: usize = 64;

/// CLAIM, fairness round: one due row from each of up to `tenants` tenants in key order after
/// `after` (wrapping), looked for among the first [`FAIR_PEEK_ROWS`] of each tenant's key range.
/// Returns the locked rows and the last tenant visited. As in the SQL, the round runs only when
/// more than `max_rows` rows of `shards` are due (locked or not): otherwise the shard rounds take
/// every due row, and the round would only cost reads.
pub fn claim_fair(
    t: &mut Tables,
    txn: u64,
    now: Us,
    (shards, max_rows, since): (&[u8], u32, Us),
    tenants: u32,
    after: Option<&str>,
) -> (Vec<(TimerKey, Us)>, Option<String>) {
    if tenants == 0 || !more_due_than(t, shards, (since, now), max_rows as usize) {
        return (Vec::new(), None);
    }
    let visit = fair_round_tenants(t, tenants as usize, after);
    let mut picked = Vec::new();
    for tenant in &visit {
        if let Some((key, visible_at)) = first_due_row(t, tenant, now)
            && !t.row_locks.contains_key(&key)
        {
            t.row_locks.insert(key.clone(), txn);
            picked.push((key, visible_at));
        }
    }
    (picked, visit.last().cloned())
}

/// Whether more than `n` rows of `shards` are due at `now`, whoever holds them.
fn more_due_than(t: &Tables, shards: &[u8], (since, now): (Us, Us), n: usize) -> bool {
    shards
        .iter()
        .flat_map(|&shard| {
            t.index
                .range((shard, since, min_key())..)
                .take_while(move |(s, visible_at, _)| *s == shard && *visible_at <= now)
        })
        .take(n + 1)
        .count()
        > n
}

/// The tenants a fairness round visits: up to `tenants` of them in key order after `after`, then
/// wrapping round to the first tenant and on up to `after` itself, each at most once.
fn fair_round_tenants(t: &Tables, tenants: usize, after: Option<&str>) -> Vec<String> {
    let mut visit: Vec<String> = Vec::new();
    let mut cursor = after.unwrap_or("").to_owned();
    while visit.len() < tenants {
        match tenant_after(t, &cursor) {
            Some(tenant) => {
                cursor.clone_from(&tenant);
                visit.push(tenant);
            }
            None => break,
        }
    }
    if let Some(after) = after {
        let mut cursor = String::new();
        let first = t.timers.keys().next().map(|k| k.tenant.clone());
        let mut candidate = first;
        while visit.len() < tenants {
            match candidate {
                Some(tenant) if tenant.as_str() <= after => {
                    cursor.clone_from(&tenant);
                    if !visit.contains(&tenant) {
                        visit.push(tenant);
                    }
                    candidate = tenant_after(t, &cursor);
                }
                _ => break,
            }
        }
    }
    visit
}

/// The first tenant with a timer row whose name sorts after `after`.
fn tenant_after(t: &Tables, after: &str) -> Option<String> {
    let floor = TimerKey {
        tenant: format!("{after}\0"),
        queue: String::new(),
        key: String::new(),
    };
    t.timers
        .range(floor..)
        .next()
        .map(|(k, _)| k.tenant.clone())
}

/// A tenant's first due row among the first [`FAIR_PEEK_ROWS`] of its key range, with its
/// visible_at.
fn first_due_row(t: &Tables, tenant: &str, now: Us) -> Option<(TimerKey, Us)> {
    let floor = TimerKey {
        tenant: tenant.to_owned(),
        queue: String::new(),
        key: String::new(),
    };
    t.timers
        .range(floor..)
        .take_while(|(k, _)| k.tenant == tenant)
        .take(FAIR_PEEK_ROWS)
        .find(|(_, row)| row.visible_at() <= now)
        .map(|(k, row)| (k.clone(), row.visible_at()))
}

/// CLAIM, second half (commit): leases and tokens, in pre-claim visibility order.
pub fn claim_commit(
    t: &mut Tables,
    txn: u64,
    picked: Vec<(TimerKey, Us)>,
    now: Us,
    lease_us: Us,
) -> Vec<ClaimedTimer> {
    let mut ordered = picked;
    ordered.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let mut claimed = Vec::with_capacity(ordered.len());
    for (key, _) in ordered {
        let token = t.new_token();
        let mut row = t.timers.get(&key).expect("a locked row exists").clone();
        row.claimed_until = Some(now + lease_us);
        row.token = Some(token);
        claimed.push(ClaimedTimer {
            destination: Destination {
                tenant: key.tenant.clone(),
                queue: key.queue.clone(),
                partition: row.partition.clone(),
            },
            timer_key: key.key.clone(),
            token,
            attempts: row.attempts,
            late_ms: now.saturating_sub(row.deliver_at) / 1000,
            payload_bytes: row.payload_bytes,
        });
        t.insert_timer(key, row);
    }
    t.release_locks(txn);
    claimed
}

/// The rows of a fire call, per segment, as keys with tokens.
pub fn fire_rows(call: &FireCall) -> Vec<Vec<(TimerKey, Uuid)>> {
    call.segments
        .iter()
        .map(|segment| {
            segment
                .timers
                .iter()
                .map(|held| {
                    let key = TimerKey {
                        tenant: segment.destination.tenant.clone(),
                        queue: segment.destination.queue.clone(),
                        key: held.timer_key.clone(),
                    };
                    (key, held.token)
                })
                .collect()
        })
        .collect()
}

/// FIRE's guards: the call's shape, as `log_timers_fire_v1` checks it.
pub fn fire_check(call: &FireCall) -> Result<(), SqlError> {
    let mut destinations = std::collections::BTreeSet::new();
    let mut keys = std::collections::BTreeSet::new();
    for segment in &call.segments {
        if segment.timers.is_empty() {
            return Err(invalid("log_timers_fire_v1: segment sizes must be >= 1"));
        }
        if !destinations.insert(&segment.destination) {
            return Err(invalid(
                "log_timers_fire_v1: two segments name the same destination",
            ));
        }
        for held in &segment.timers {
            if !keys.insert((
                &segment.destination.tenant,
                &segment.destination.queue,
                &held.timer_key,
            )) {
                return Err(invalid(
                    "log_timers_fire_v1: a timer appears twice in one call",
                ));
            }
        }
    }
    Ok(())
}

/// What one lock attempt of a fire found for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// Locked by this fire, token matches.
    Held,
    /// Token matches, but another transaction locks the row this instant: poll again.
    Busy,
    /// Gone, or another token.
    Lost,
}

/// FIRE, lock step (SKIP LOCKED): locks every row still carrying its token and not locked by
/// another transaction.
pub fn fire_lock(t: &mut Tables, txn: u64, rows: &[(TimerKey, Uuid)], states: &mut [RowState]) {
    for (i, (key, token)) in rows.iter().enumerate() {
        if states[i] == RowState::Held {
            continue;
        }
        let ours = t
            .timers
            .get(key)
            .is_some_and(|row| row.token == Some(*token));
        states[i] = if !ours {
            RowState::Lost
        } else if t.locked_by_other(key, txn) {
            RowState::Busy
        } else {
            t.row_locks.insert(key.clone(), txn);
            RowState::Held
        };
    }
}

/// FIRE, stale segment: gives back the rows this fire holds, visible at once (from `now`).
pub fn release_stale(t: &mut Tables, rows: &[(TimerKey, Uuid)], states: &[RowState], now: Us) {
    for (i, (key, _)) in rows.iter().enumerate() {
        if states[i] == RowState::Held {
            t.update_timer(key, |row| {
                row.token = None;
                row.claimed_until = Some(now);
            });
        }
    }
}

/// FIRE, live segment (commit): the timers become messages; returns the first offset.
pub fn fire_commit_segment(
    t: &mut Tables,
    destination: &Destination,
    rows: &[(TimerKey, Uuid)],
    now: Us,
    by: &str,
) -> u64 {
    let entries: Vec<(String, Uuid)> = rows
        .iter()
        .map(|(key, _)| {
            let row = t.remove_timer(key).expect("a held row exists");
            (row.txn, row.message_id)
        })
        .collect();
    t.append(destination, entries, now, super::state::Source::Fire, by)
}

/// FAIL: backoff, attempts, exhaustion, for rows still held with their token.
pub fn fail(
    t: &mut Tables,
    txn: u64,
    rows: &[FailRow],
    error: &str,
    transient: bool,
    max_attempts: u32,
    now: Us,
) -> Vec<FailOutcome> {
    let mut outcomes = Vec::new();
    for row in rows {
        let key = timer_key(&row.timer);
        let held = t
            .timers
            .get(&key)
            .is_some_and(|r| r.token == Some(row.timer.token))
            && !t.locked_by_other(&key, txn);
        if !held {
            continue;
        }
        let mut updated = t.timers[&key].clone();
        updated.attempts += u32::from(!transient);
        let exhausted = !transient && updated.attempts >= max_attempts;
        if !transient {
            updated.last_error = Some(error.chars().take(2000).collect());
        }
        if !exhausted {
            updated.token = None;
            updated.claimed_until = Some(now + row.backoff.as_micros() as Us);
        }
        outcomes.push(FailOutcome {
            tenant: key.tenant.clone(),
            queue: key.queue.clone(),
            timer_key: key.key.clone(),
            attempts: updated.attempts,
            exhausted,
        });
        t.insert_timer(key, updated);
    }
    outcomes.sort_by(|a, b| {
        (&a.tenant, &a.queue, &a.timer_key).cmp(&(&b.tenant, &b.queue, &b.timer_key))
    });
    outcomes
}

/// DLQ: archives rows still held with their token.
pub fn dlq(t: &mut Tables, txn: u64, rows: &[TimerRef]) -> u64 {
    let mut archived = 0;
    for timer in rows {
        let key = timer_key(timer);
        let held = t
            .timers
            .get(&key)
            .is_some_and(|r| r.token == Some(timer.token))
            && !t.locked_by_other(&key, txn);
        if held && let Some(row) = t.remove_timer(&key) {
            t.dlq.push(DeadLetter {
                key,
                txn: row.txn,
                payload_bytes: row.payload_bytes,
                attempts: row.attempts,
            });
            archived += 1;
        }
    }
    archived
}

fn timer_key(timer: &TimerRef) -> TimerKey {
    TimerKey {
        tenant: timer.tenant.clone(),
        queue: timer.queue.clone(),
        key: timer.timer_key.clone(),
    }
}

/// PRUNE: deletes expired rows (expiry at or before now) up to the budget, in shard order. As
/// the SQL does, candidates are found without locks, and a row another open transaction holds (a
/// put in flight) is skipped, never waited on (`FOR UPDATE SKIP LOCKED`): it still counts toward
/// the budget and `done`, and its committed version still counts as unpruned.
pub fn kv_expire_step(
    t: &mut Tables,
    shards: &[u8],
    now: Us,
    max_rows: u32,
    unpruned_cap: u64,
) -> ExpireStep {
    let candidates = kv_expired_candidates(t, shards, now, max_rows);
    let done = candidates.len() < max_rows as usize;
    let mut deleted = 0;
    for key in candidates {
        if t.kv_locked_by_other(&key, 0) {
            t.kv_skipped_locked += 1;
        } else if t.prune_kv(&key, now) {
            deleted += 1;
        }
    }
    let alarm = kv_alarm(t, shards, now, unpruned_cap);
    ExpireStep {
        deleted,
        done,
        unpruned: alarm.expired,
        unpruned_capped: alarm.capped,
        lag_ms: alarm.lag_ms,
    }
}

/// The prune's candidates: committed rows expired at `now`, oldest first per shard, shards in
/// the caller's order, at most `max_rows` in all. Read without locks.
pub fn kv_expired_candidates(t: &Tables, shards: &[u8], now: Us, max_rows: u32) -> Vec<KvKey> {
    let mut candidates = Vec::new();
    for &shard in shards {
        let remaining = max_rows as usize - candidates.len();
        if remaining == 0 {
            break;
        }
        candidates.extend(
            t.kv_index
                .range((shard, 0, min_kv())..)
                .take_while(|(s, expires_at, _)| *s == shard && *expires_at <= now)
                .take(remaining)
                .map(|(_, _, key)| key.clone()),
        );
    }
    candidates
}

/// KV PUT (`queen.kv_put_v2`): inside transaction `txn`, the new version is written under the
/// row's lock and stays invisible until [`Tables::commit_kv`]; with `txn` `None` it commits at
/// once. Returns `Err(key)` when another transaction holds the row, to wait and retry, as the
/// put's `ON CONFLICT DO UPDATE` waits.
pub fn kv_put(t: &mut Tables, txn: Option<u64>, key: KvKey, row: KvRow) -> Result<(), KvKey> {
    if t.kv_locked_by_other(&key, txn.unwrap_or(0)) {
        return Err(key);
    }
    match txn {
        Some(txn) => {
            t.kv_locks.insert(key, KvLock { txn, pending: row });
        }
        None => t.put_kv(key, row),
    }
    Ok(())
}

fn min_kv() -> KvKey {
    KvKey {
        tenant: String::new(),
        namespace: String::new(),
        key: String::new(),
    }
}

/// ROLLUP: per-tenant live kv and pending timers, for up to `max_tenants` tenants after `after`.
pub fn usage_step(t: &mut Tables, after: Option<&str>, now: Us, max_tenants: u32) -> UsageStep {
    let after = after.unwrap_or("");
    let mut tenants: Vec<String> =
        t.kv.keys()
            .map(|k| k.tenant.clone())
            .chain(t.timers.keys().map(|k| k.tenant.clone()))
            .filter(|tenant| tenant.as_str() > after)
            .collect();
    tenants.sort();
    tenants.dedup();
    tenants.truncate(max_tenants as usize);
    let done = tenants.len() < max_tenants as usize;
    let last = tenants.last().cloned();
    let mut fresh: BTreeMap<String, super::state::Usage> = tenants
        .iter()
        .map(|x| (x.clone(), Default::default()))
        .collect();
    // Bytes are what the SQL counts: the stored sizes of what a tenant controls, namespace, key
    // and value for KV, queue, timer key and payload for timers.
    for (key, row) in &t.kv {
        if let Some(usage) = fresh.get_mut(&key.tenant)
            && row.expires_at.is_none_or(|e| e > now)
        {
            usage.kv_rows += 1;
            usage.kv_bytes += (key.namespace.len() + key.key.len()) as u64 + row.bytes;
        }
    }
    for (key, row) in &t.timers {
        if let Some(usage) = fresh.get_mut(&key.tenant) {
            usage.timer_rows += 1;
            usage.timer_bytes += (key.queue.len() + key.key.len()) as u64 + row.payload_bytes;
        }
    }
    let mut zeroed = 0;
    for (tenant, usage) in t.usage.iter_mut() {
        let covered =
            tenant.as_str() > after && (done || last.as_ref().is_some_and(|l| tenant <= l));
        if covered && !fresh.contains_key(tenant) && *usage != Default::default() {
            *usage = Default::default();
            zeroed += 1;
        }
    }
    let count = fresh.len() as u32;
    t.usage.extend(fresh);
    UsageStep {
        tenants: count,
        zeroed,
        done,
        last_tenant: last,
    }
}

/// One staged change of an open schedule transaction.
#[derive(Debug, Clone)]
pub enum Staged {
    Put(TimerKey, TimerRow),
    Delete(TimerKey),
}

/// The schedule seam's apply, inside an open transaction: locks the rows it touches (the
/// caller waits while another transaction holds one) and stages its changes for commit.
/// Returns `Err(key)` naming a row locked by another transaction, to wait and retry.
pub fn apply(
    t: &mut Tables,
    txn: u64,
    tenant: &str,
    ops: &[TimerOp],
    now: Us,
    staged: &mut Vec<Staged>,
) -> Result<Result<Vec<ApplyResult>, SqlError>, TimerKey> {
    let keys: Vec<TimerKey> = ops.iter().map(|op| op_key(tenant, op)).collect();
    if let Some(busy) = keys.iter().find(|k| t.locked_by_other(k, txn)) {
        return Err(busy.clone());
    }
    let distinct: std::collections::BTreeSet<&TimerKey> = keys.iter().collect();
    if distinct.len() != keys.len() {
        return Ok(Err(invalid(
            "log_timers_apply_v1: the same (queue, timerKey) appears twice in one call",
        )));
    }
    let mut results = Vec::with_capacity(ops.len());
    for (index, (op, key)) in ops.iter().zip(keys).enumerate() {
        t.row_locks.insert(key.clone(), txn);
        let existing = staged_view(t, staged, &key);
        let (status, row) = apply_op(t, op, &key, existing, now, staged);
        results.push(apply_result(index, &key, status, row.as_ref(), now));
    }
    Ok(Ok(results))
}

/// One operation on its row as this transaction sees it (`existing`): stages the change, and
/// returns the status with the row as the operation leaves it.
fn apply_op(
    t: &mut Tables,
    op: &TimerOp,
    key: &TimerKey,
    existing: Option<TimerRow>,
    now: Us,
    staged: &mut Vec<Staged>,
) -> (ApplyStatus, Option<TimerRow>) {
    match (op, existing) {
        (TimerOp::Cancel { .. }, None) | (TimerOp::Reschedule { .. }, None) => {
            (ApplyStatus::Absent, None)
        }
        (_, Some(row)) if row.held_at(now) => (ApplyStatus::TooLate, Some(row)),
        (TimerOp::Cancel { .. }, Some(row)) => {
            staged.push(Staged::Delete(key.clone()));
            (ApplyStatus::Cancelled, Some(row))
        }
        (
            TimerOp::Schedule {
                delay_ms,
                payload,
                partition,
                txn: op_txn,
                ..
            },
            existing,
        ) => {
            let message_id = existing.as_ref().map_or_else(
                || Uuid::from_u128(t.new_token().as_u128() << 1),
                |r| r.message_id,
            );
            let deliver_at = shift(now, *delay_ms);
            let row = visible_from_now(
                scheduled(
                    message_id,
                    deliver_at,
                    payload,
                    partition.as_deref(),
                    op_txn.as_deref(),
                ),
                now,
            );
            staged.push(Staged::Put(key.clone(), row.clone()));
            let status = if existing.is_some() {
                ApplyStatus::Rescheduled
            } else {
                ApplyStatus::Scheduled
            };
            (status, Some(row))
        }
        (
            TimerOp::Reschedule {
                delay_ms,
                payload,
                partition,
                txn: op_txn,
                ..
            },
            Some(row),
        ) => {
            let deliver_at = shift(now, *delay_ms);
            let row = visible_from_now(
                rescheduled(
                    row,
                    deliver_at,
                    payload.as_ref(),
                    partition.as_deref(),
                    op_txn.as_deref(),
                ),
                now,
            );
            staged.push(Staged::Put(key.clone(), row.clone()));
            (ApplyStatus::Rescheduled, Some(row))
        }
    }
}

/// A row whose delivery is already past is visible from `now`, not before, as the SQL writes it:
/// no write makes a row visible before its own now (the sweeper's head floors rely on it).
fn visible_from_now(mut row: TimerRow, now: Us) -> TimerRow {
    if row.deliver_at < now {
        row.claimed_until = Some(now);
    }
    row
}

/// The row a schedule writes: a fresh row (no attempts, in no sweeper's hands) that keeps the
/// message id of the row it replaces; the partition defaults to `default` and the transaction
/// id to the message id.
fn scheduled(
    message_id: Uuid,
    deliver_at: Us,
    payload: &Payload,
    partition: Option<&str>,
    op_txn: Option<&str>,
) -> TimerRow {
    TimerRow {
        partition: partition.map_or_else(|| "default".into(), str::to_owned),
        deliver_at,
        txn: op_txn.map_or_else(|| message_id.to_string(), str::to_owned),
        message_id,
        payload_bytes: payload_bytes(payload),
        attempts: 0,
        last_error: None,
        claimed_until: None,
        token: None,
    }
}

/// The row a reschedule leaves: moved to `deliver_at`, with what the operation names replaced,
/// out of any sweeper's hands and its attempts reset.
fn rescheduled(
    mut row: TimerRow,
    deliver_at: Us,
    payload: Option<&Payload>,
    partition: Option<&str>,
    op_txn: Option<&str>,
) -> TimerRow {
    row.deliver_at = deliver_at;
    if let Some(payload) = payload {
        row.payload_bytes = payload_bytes(payload);
    }
    if let Some(partition) = partition {
        row.partition = partition.to_owned();
    }
    if let Some(op_txn) = op_txn {
        row.txn = op_txn.to_owned();
    }
    row.attempts = 0;
    row.last_error = None;
    row.token = None;
    row.claimed_until = None;
    row
}

/// What the apply answers for one operation, as the SQL does: a message id whenever there is a
/// row, the delay only for a row it (re)created, the delivery time unless the row was absent.
fn apply_result(
    index: usize,
    key: &TimerKey,
    status: ApplyStatus,
    row: Option<&TimerRow>,
    now: Us,
) -> ApplyResult {
    let creates = matches!(status, ApplyStatus::Scheduled | ApplyStatus::Rescheduled);
    ApplyResult {
        index,
        queue: key.queue.clone(),
        timer_key: key.key.clone(),
        status,
        message_id: row.map(|r| r.message_id),
        deliver_in_ms: row
            .filter(|_| creates)
            .map(|r| (r.deliver_at as i64 - now as i64).div_euclid(1000)),
        deliver_at: row
            .filter(|_| status != ApplyStatus::Absent)
            .map(|r| crate::time::format_us(r.deliver_at)),
    }
}

fn op_key(tenant: &str, op: &TimerOp) -> TimerKey {
    let (queue, key) = match op {
        TimerOp::Schedule {
            queue, timer_key, ..
        }
        | TimerOp::Reschedule {
            queue, timer_key, ..
        }
        | TimerOp::Cancel { queue, timer_key } => (queue, timer_key),
    };
    TimerKey {
        tenant: tenant.to_owned(),
        queue: queue.clone(),
        key: key.clone(),
    }
}

fn staged_view(t: &Tables, staged: &[Staged], key: &TimerKey) -> Option<TimerRow> {
    let mut view = t.timers.get(key).cloned();
    for change in staged {
        match change {
            Staged::Put(k, row) if k == key => view = Some(row.clone()),
            Staged::Delete(k) if k == key => view = None,
            _ => {}
        }
    }
    view
}

fn shift(now: Us, delay_ms: i64) -> Us {
    (now as i64 + delay_ms * 1000).max(0) as Us
}

/// Bytes a payload stores: a JSON payload's text as written, a byte payload's bytes. The load
/// hosts describe large payloads instead of carrying them (`{"simBytes": N}`, see
/// [`described_payload`]): only their size matters to the model, and pushing megabytes through
/// the simulated wire would cost wall time, not fidelity.
pub fn payload_bytes(payload: &Payload) -> u64 {
    match payload {
        Payload::Json(text) => described_bytes(text).unwrap_or(text.get().len() as u64),
        Payload::Bytes(bytes) => bytes.len() as u64,
    }
}

/// The size a described payload stands for, or `None` for a payload that is what it says.
fn described_bytes(text: &JsonText) -> Option<u64> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Described {
        #[serde(rename = "simBytes")]
        sim_bytes: u64,
    }
    // Only an object that starts with the field is parsed: a payload is otherwise never read.
    text.get()
        .starts_with(r#"{"simBytes":"#)
        .then(|| serde_json::from_str::<Described>(text.get()).ok())
        .flatten()
        .map(|d| d.sim_bytes)
}

/// A payload of `bytes` bytes, described rather than carried.
pub fn described_payload(bytes: u64) -> Payload {
    Payload::json(&serde_json::json!({ "simBytes": bytes }))
}

/// Commits an open schedule transaction.
pub fn apply_commit(t: &mut Tables, txn: u64, staged: Vec<Staged>) {
    for change in staged {
        match change {
            Staged::Put(key, row) => t.insert_timer(key, row),
            Staged::Delete(key) => {
                t.remove_timer(&key);
            }
        }
    }
    t.commit_kv(txn);
    t.release_locks(txn);
}
