//! Leader election for group commit (FlatStore's pipelined horizontal batching).
//!
//! Writers [`join`](GroupCommit::join) a queue. If no leader is active, the joiner
//! becomes the leader and takes *every* pending request; the others sleep. The leader
//! writes the group, then [`finish`](GroupCommit::finish)es: it hands each member its
//! result and gives up leadership *before* anyone syncs, so the next group gathers and
//! is written while this one is on the device. There is no size or time threshold: a
//! group is whatever arrived while the previous leader was writing, and a lone writer
//! leads a group of one at once.
//!
//! Every state change happens under one mutex. Each sleeping writer waits on its own
//! condition variable, and a change wakes exactly the writers it concerns: the members
//! whose results it hands out, and, when leadership is freed, the oldest writer still
//! queued. A woken writer re-checks its own condition (result ready, or leadership free
//! and its request not yet taken), so no wake-up is lost and none is wasted on a herd.
//!
//! Before it sleeps, a writer watches for a change for a few microseconds without the
//! lock (`spin.rs`): every change bumps a counter it can read without the lock, and a
//! writer that sees it move re-checks under the lock. A leader writing a small group
//! is done within that time, and a writer not yet asleep needs no wake-up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// What [`GroupCommit::join`] gives a writer.
pub(crate) enum Role<R, O> {
    /// Lead this group (requests in ticket order; the first field is the leader's own
    /// ticket): write it, then call [`GroupCommit::finish`] with the others' results.
    Lead(u64, Vec<(u64, R)>),
    /// A leader wrote (or failed to write) this writer's request.
    Done(O),
    /// The queue is closed; the request was not taken.
    Closed,
}

struct Queue<R, O> {
    pending: Vec<(u64, R)>,
    next_ticket: u64,
    /// Every ticket at or below this was taken by some leader.
    taken_upto: u64,
    leading: bool,
    closed: bool,
    done: HashMap<u64, O>,
    /// The condition variable of every writer asleep in [`GroupCommit::join`].
    sleepers: HashMap<u64, Arc<Condvar>>,
}

impl<R, O> Queue<R, O> {
    fn wake(&self, ticket: u64) {
        if let Some(cv) = self.sleepers.get(&ticket) {
            cv.notify_one();
        }
    }

    /// Wakes the oldest queued writer, which leads next.
    fn wake_next_leader(&self) {
        if let Some(&(ticket, _)) = self.pending.first() {
            self.wake(ticket);
        }
    }

    fn hand_out(&mut self, results: impl IntoIterator<Item = (u64, O)>) {
        for (ticket, out) in results {
            self.wake(ticket);
            self.done.insert(ticket, out);
        }
    }
}

/// The group-commit queue.
pub(crate) struct GroupCommit<R, O> {
    q: Mutex<Queue<R, O>>,
    /// Where [`GroupCommit::close`] waits for the active leader.
    idle: Condvar,
    /// Bumped (under `q`'s lock) by every change a queued writer may be waiting for:
    /// results handed out, leadership freed, the queue closed.
    changes: AtomicU64,
}

impl<R, O> std::fmt::Debug for GroupCommit<R, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupCommit")
    }
}

impl<R, O> GroupCommit<R, O> {
    pub(crate) fn new() -> Self {
        GroupCommit {
            q: Mutex::new(Queue {
                pending: Vec::new(),
                next_ticket: 0,
                taken_upto: 0,
                leading: false,
                closed: false,
                done: HashMap::new(),
                sleepers: HashMap::new(),
            }),
            idle: Condvar::new(),
            changes: AtomicU64::new(0),
        }
    }

    /// Records a change queued writers may be waiting for (the caller holds the lock).
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// Queues `req` and waits until this writer either leads a group (which holds `req`)
    /// or has its result from another leader.
    pub(crate) fn join(&self, req: R) -> Role<R, O> {
        let mut q = self.q.lock();
        if q.closed {
            return Role::Closed;
        }
        q.next_ticket += 1;
        let me = q.next_ticket;
        q.pending.push((me, req));
        let mut cv: Option<Arc<Condvar>> = None;
        let role = loop {
            if let Some(out) = q.done.remove(&me) {
                break Role::Done(out);
            }
            if me > q.taken_upto {
                if q.closed {
                    q.pending.retain(|(t, _)| *t != me);
                    break Role::Closed;
                }
                if !q.leading {
                    q.leading = true;
                    q.taken_upto = q.next_ticket;
                    break Role::Lead(me, std::mem::take(&mut q.pending));
                }
            }
            match &cv {
                Some(cv) => cv.wait(&mut q),
                None => {
                    // Watch for a change without the lock first; sleep only if none
                    // comes soon (then registered, so the change wakes this writer).
                    let seen = self.changes.load(Ordering::Acquire);
                    let changes = &self.changes;
                    let moved = parking_lot::MutexGuard::unlocked(&mut q, || {
                        crate::spin::until(|| changes.load(Ordering::Acquire) != seen)
                    });
                    if !moved {
                        let c = Arc::new(Condvar::new());
                        q.sleepers.insert(me, Arc::clone(&c));
                        cv = Some(c);
                    }
                }
            }
        };
        if cv.is_some() {
            q.sleepers.remove(&me);
        }
        role
    }

    /// Ends the leader's turn: hands out `results` (one per ticket it took, its own
    /// included or not) and frees leadership for the next group.
    pub(crate) fn finish(&self, results: impl IntoIterator<Item = (u64, O)>) {
        let mut q = self.q.lock();
        q.hand_out(results);
        q.leading = false;
        q.wake_next_leader();
        self.changed();
        self.idle.notify_all();
    }

    /// Ends one round of the leader's turn like [`GroupCommit::finish`], but if more
    /// requests queued meanwhile, keeps leadership and returns them: leading them at once
    /// costs one write, while handing over would cost waking another thread first.
    pub(crate) fn finish_or_continue(
        &self,
        results: impl IntoIterator<Item = (u64, O)>,
    ) -> Option<Vec<(u64, R)>> {
        let mut q = self.q.lock();
        q.hand_out(results);
        self.changed();
        if q.pending.is_empty() || q.closed {
            q.leading = false;
            q.wake_next_leader();
            self.idle.notify_all();
            return None;
        }
        q.taken_upto = q.next_ticket;
        Some(std::mem::take(&mut q.pending))
    }

    /// Whether a write is about to land: a leader is writing, or requests wait for one.
    pub(crate) fn busy(&self) -> bool {
        let q = self.q.lock();
        !q.closed && (q.leading || !q.pending.is_empty())
    }

    /// Closes the queue: waits for the active leader to finish, then refuses every later
    /// and every still-pending request with [`Role::Closed`].
    pub(crate) fn close(&self) {
        let mut q = self.q.lock();
        while q.leading {
            self.idle.wait(&mut q);
        }
        q.leading = true;
        q.closed = true;
        self.changed();
        for cv in q.sleepers.values() {
            cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Many threads join; each request is led exactly once, every writer gets its own
    /// result, and nobody is left asleep (the test would hang).
    #[test]
    fn every_request_is_led_once_and_answered() {
        let gc: Arc<GroupCommit<usize, usize>> = Arc::new(GroupCommit::new());
        let led = Arc::new(AtomicUsize::new(0));
        let groups = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (gc, led, groups) = (Arc::clone(&gc), Arc::clone(&led), Arc::clone(&groups));
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let req = t * 1000 + i;
                        let got = match gc.join(req) {
                            Role::Lead(me, group) => {
                                groups.fetch_add(1, Ordering::Relaxed);
                                led.fetch_add(group.len(), Ordering::Relaxed);
                                assert!(group.windows(2).all(|w| w[0].0 < w[1].0));
                                let mine = group.iter().find(|(tk, _)| *tk == me).unwrap().1;
                                assert_eq!(mine, req, "a leader's group holds its request");
                                let others = group.into_iter().filter(|(tk, _)| *tk != me);
                                gc.finish(others.map(|(tk, r)| (tk, r * 2)));
                                mine * 2
                            }
                            Role::Done(out) => out,
                            Role::Closed => panic!("not closed"),
                        };
                        assert_eq!(got, req * 2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total = led.load(Ordering::Relaxed);
        assert_eq!(total, 8 * 500, "every request led exactly once");
        assert!(groups.load(Ordering::Relaxed) > 0);
    }

    /// A writer queued behind an active leader while the queue closes is answered
    /// (it either led a last group or was refused) and never left asleep.
    #[test]
    fn closing_wakes_writers_queued_behind_a_leader() {
        let gc: Arc<GroupCommit<u8, u8>> = Arc::new(GroupCommit::new());
        let Role::Lead(_, first) = gc.join(1) else {
            panic!("the first writer leads")
        };
        let g = Arc::clone(&gc);
        let queued = std::thread::spawn(move || match g.join(2) {
            Role::Lead(_, group) => {
                g.finish(Vec::new());
                assert_eq!(group.len(), 1);
                "led"
            }
            Role::Closed => "closed",
            Role::Done(_) => panic!("nobody else leads"),
        });
        while gc.q.lock().pending.is_empty() {
            std::thread::yield_now();
        }
        let g = Arc::clone(&gc);
        let closer = std::thread::spawn(move || g.close());
        assert_eq!(first.len(), 1);
        gc.finish(Vec::new());
        closer.join().unwrap();
        let outcome = queued.join().unwrap();
        assert!(outcome == "led" || outcome == "closed");
        assert!(matches!(gc.join(3), Role::Closed));
    }

    /// A follower whose leader takes far longer than the watch before it sleeps
    /// (`spin.rs`) goes to sleep registered, and the leader's hand-out wakes it; the
    /// next writer, alone, leads at once and leaves no sleeper behind.
    #[test]
    fn a_follower_behind_a_slow_leader_sleeps_and_is_woken() {
        let gc: Arc<GroupCommit<u8, u8>> = Arc::new(GroupCommit::new());
        let Role::Lead(_, first) = gc.join(1) else {
            panic!("the first writer leads")
        };
        let g = Arc::clone(&gc);
        let follower = std::thread::spawn(move || match g.join(2) {
            Role::Lead(me, group) => {
                g.finish(Vec::new());
                (Some(me), group.len(), 0)
            }
            Role::Done(out) => (None, 0, out),
            Role::Closed => panic!("not closed"),
        });
        // Long past the watch: the follower is asleep, registered.
        while gc.q.lock().sleepers.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(first.len(), 1);
        // Lead the follower's request too (it queued behind this leader).
        let more = gc
            .finish_or_continue(Vec::new())
            .expect("the follower queued");
        assert_eq!(more.len(), 1);
        gc.finish(more.into_iter().map(|(t, r)| (t, r * 10)));
        assert_eq!(follower.join().unwrap(), (None, 0, 20));
        assert!(gc.q.lock().sleepers.is_empty());
        assert!(matches!(gc.join(3), Role::Lead(_, g) if g.len() == 1));
        assert!(
            gc.q.lock().sleepers.is_empty(),
            "a lone leader never sleeps"
        );
    }

    #[test]
    fn a_closed_queue_refuses_requests() {
        let gc: GroupCommit<u8, u8> = GroupCommit::new();
        gc.close();
        assert!(matches!(gc.join(1), Role::Closed));
    }
}
