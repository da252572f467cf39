//! The two operator kill switches: in-process atomics, mirrored to `queen.system_state` so every
//! broker and every operator sees the same answer.
//!
//! - `timers_schedule_enabled` off: new schedules are refused (cancels still work). Harmless and
//!   instant.
//! - `timers_fire_enabled` off: the fire stops; the probe keeps running read-only so the backlog
//!   gauge stays true, and the prune keeps its cadence. Stopping it accumulates promised work.
//!
//! The halves have opposite costs, which is why they are two switches and not one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::admission::Admission;
use crate::error::Result;
use crate::port::Store;
use crate::types::{Switch, SwitchStates};

/// Both switches of one broker process, shared by its sweeper, its seam and its API.
#[derive(Debug, Clone)]
pub struct Switches {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    schedule: AtomicBool,
    fire: AtomicBool,
}

impl Default for Switches {
    fn default() -> Self {
        Switches {
            inner: Arc::new(Inner {
                schedule: AtomicBool::new(true),
                fire: AtomicBool::new(true),
            }),
        }
    }
}

impl Switches {
    /// Whether new schedules are accepted.
    pub fn schedule_enabled(&self) -> bool {
        self.inner.schedule.load(Ordering::Acquire)
    }

    /// Whether the sweeper fires.
    pub fn fire_enabled(&self) -> bool {
        self.inner.fire.load(Ordering::Acquire)
    }

    /// Both, as last known in this process.
    pub fn states(&self) -> SwitchStates {
        SwitchStates {
            schedule_enabled: self.schedule_enabled(),
            fire_enabled: self.fire_enabled(),
        }
    }

    /// Sets a switch in this process only (the database is not told).
    pub(crate) fn set_local(&self, switch: Switch, enabled: bool) {
        let flag = match switch {
            Switch::Schedule => &self.inner.schedule,
            Switch::Fire => &self.inner.fire,
        };
        flag.store(enabled, Ordering::Release);
    }

    /// Turns a switch on or off: the database first (so the choice survives and reaches every
    /// broker), then this process.
    pub async fn set<S: Store>(
        &self,
        store: &S,
        admission: &Admission,
        switch: Switch,
        enabled: bool,
    ) -> Result<()> {
        let slot = admission.maintenance().await;
        store.write_switch(&slot, switch, enabled).await?;
        self.set_local(switch, enabled);
        tracing::warn!(switch = switch.key(), enabled, "kill switch set");
        Ok(())
    }

    /// Takes both switches as the database has them (the probe carries them on every pass),
    /// saying so when one changed.
    pub fn observe(&self, states: SwitchStates) {
        for (switch, enabled) in [
            (Switch::Schedule, states.schedule_enabled),
            (Switch::Fire, states.fire_enabled),
        ] {
            let flag = match switch {
                Switch::Schedule => &self.inner.schedule,
                Switch::Fire => &self.inner.fire,
            };
            if flag.swap(enabled, Ordering::AcqRel) != enabled {
                tracing::warn!(
                    switch = switch.key(),
                    enabled,
                    "kill switch changed in the database"
                );
            }
        }
    }

    /// Reads both switches from the database into this process.
    pub async fn refresh<S: Store>(
        &self,
        store: &S,
        admission: &Admission,
    ) -> Result<SwitchStates> {
        let slot = admission.maintenance().await;
        let states = store.read_switches(&slot).await?;
        self.observe(states);
        Ok(states)
    }
}
