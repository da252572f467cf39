//! Admission lanes: every database call takes a slot in its lane before it takes a connection.
//!
//! Inverting the two deadlocks the pool under load: tasks holding connections wait for slots
//! while the tasks holding slots wait for connections. The order is enforced by types, not by
//! care: every [`Store`](crate::Store) method takes a `&Slot<Maintenance>`, and the store
//! only takes a connection inside the method. The sweeper runs in the maintenance lane and cannot
//! name another: a `Slot<Push>` does not fit a store call.

use std::marker::PhantomData;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A lane of work, named for metrics and logs.
pub trait Lane: Send + Sync + 'static {
    /// The lane's name.
    const NAME: &'static str;
}

/// Producers appending to the log.
#[derive(Debug)]
pub enum Push {}
/// Consumers reading the log.
#[derive(Debug)]
pub enum Pop {}
/// Consumers acknowledging.
#[derive(Debug)]
pub enum Ack {}
/// Background work: the sweeper's probe, claim, fire, prune and rollup.
#[derive(Debug)]
pub enum Maintenance {}

impl Lane for Push {
    const NAME: &'static str = "push";
}
impl Lane for Pop {
    const NAME: &'static str = "pop";
}
impl Lane for Ack {
    const NAME: &'static str = "ack";
}
impl Lane for Maintenance {
    const NAME: &'static str = "maintenance";
}

/// Slots per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneSizes {
    /// Producers' slots.
    pub push: usize,
    /// Consumers' read slots.
    pub pop: usize,
    /// Consumers' acknowledgement slots.
    pub ack: usize,
    /// The sweeper's slots.
    pub maintenance: usize,
}

impl Default for LaneSizes {
    /// The sweeper's loop runs one call at a time; two maintenance slots leave room for the
    /// switch refresh beside it. Not measured.
    fn default() -> Self {
        LaneSizes {
            push: 8,
            pop: 8,
            ack: 8,
            maintenance: 2,
        }
    }
}

/// The lanes of one broker process. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admission {
    push: Arc<Semaphore>,
    pop: Arc<Semaphore>,
    ack: Arc<Semaphore>,
    maintenance: Arc<Semaphore>,
}

/// Permission to make one database call in lane `L`; released on drop.
#[derive(Debug)]
pub struct Slot<L: Lane> {
    _permit: OwnedSemaphorePermit,
    _lane: PhantomData<L>,
}

impl Admission {
    /// Lanes of `sizes` slots (a zero size still admits one call).
    pub fn new(sizes: LaneSizes) -> Admission {
        let lane = |n: usize| Arc::new(Semaphore::new(n.max(1)));
        Admission {
            push: lane(sizes.push),
            pop: lane(sizes.pop),
            ack: lane(sizes.ack),
            maintenance: lane(sizes.maintenance),
        }
    }

    /// Waits for a maintenance slot.
    pub async fn maintenance(&self) -> Slot<Maintenance> {
        Self::take(&self.maintenance).await
    }

    /// Waits for a push slot.
    pub async fn push(&self) -> Slot<Push> {
        Self::take(&self.push).await
    }

    /// Waits for a pop slot.
    pub async fn pop(&self) -> Slot<Pop> {
        Self::take(&self.pop).await
    }

    /// Waits for an ack slot.
    pub async fn ack(&self) -> Slot<Ack> {
        Self::take(&self.ack).await
    }

    /// Free slots in the maintenance lane (for metrics and tests).
    pub fn maintenance_available(&self) -> usize {
        self.maintenance.available_permits()
    }

    async fn take<L: Lane>(semaphore: &Arc<Semaphore>) -> Slot<L> {
        let permit = Arc::clone(semaphore)
            .acquire_owned()
            .await
            .expect("admission semaphores are never closed");
        Slot {
            _permit: permit,
            _lane: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_is_held_until_dropped_and_lanes_are_independent() {
        let admission = Admission::new(LaneSizes {
            push: 1,
            pop: 1,
            ack: 1,
            maintenance: 1,
        });
        let slot = admission.maintenance().await;
        assert_eq!(admission.maintenance_available(), 0);
        // The push lane is not affected by a full maintenance lane.
        let _push = admission.push().await;
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.maintenance().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "a second maintenance call waits for the slot"
        );
        drop(slot);
        let _second = waiting.await.unwrap();
        assert_eq!(admission.maintenance_available(), 0);
    }

    #[test]
    fn a_zero_sized_lane_still_admits_one_call() {
        let admission = Admission::new(LaneSizes {
            push: 0,
            pop: 0,
            ack: 0,
            maintenance: 0,
        });
        assert_eq!(admission.maintenance_available(), 1);
    }
}
