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
//! Every state change happens under one mutex and wakes every sleeper, so no wake-up can
//! be lost; a sleeper re-checks its own condition (result ready, or leadership free and
//! its request not yet taken).

use std::collections::HashMap;

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
}

/// The group-commit queue.
pub(crate) struct GroupCommit<R, O> {
    q: Mutex<Queue<R, O>>,
    cv: Condvar,
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
            }),
            cv: Condvar::new(),
        }
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
        loop {
            if let Some(out) = q.done.remove(&me) {
                return Role::Done(out);
            }
            if me > q.taken_upto {
                if q.closed {
                    q.pending.retain(|(t, _)| *t != me);
                    return Role::Closed;
                }
                if !q.leading {
                    q.leading = true;
                    q.taken_upto = q.next_ticket;
                    return Role::Lead(me, std::mem::take(&mut q.pending));
                }
            }
            self.cv.wait(&mut q);
        }
    }

    /// Ends the leader's turn: hands out `results` (one per ticket it took, its own
    /// included or not) and frees leadership for the next group.
    pub(crate) fn finish(&self, results: impl IntoIterator<Item = (u64, O)>) {
        let mut q = self.q.lock();
        q.done.extend(results);
        q.leading = false;
        self.cv.notify_all();
    }

    /// Ends one round of the leader's turn like [`GroupCommit::finish`], but if more
    /// requests queued meanwhile, keeps leadership and returns them: leading them at once
    /// costs one write, while handing over would cost waking another thread first.
    pub(crate) fn finish_or_continue(
        &self,
        results: impl IntoIterator<Item = (u64, O)>,
    ) -> Option<Vec<(u64, R)>> {
        let mut q = self.q.lock();
        q.done.extend(results);
        if q.pending.is_empty() || q.closed {
            q.leading = false;
            self.cv.notify_all();
            return None;
        }
        q.taken_upto = q.next_ticket;
        let more = std::mem::take(&mut q.pending);
        self.cv.notify_all();
        Some(more)
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
            self.cv.wait(&mut q);
        }
        q.leading = true;
        q.closed = true;
        self.cv.notify_all();
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

    #[test]
    fn a_closed_queue_refuses_requests() {
        let gc: GroupCommit<u8, u8> = GroupCommit::new();
        gc.close();
        assert!(matches!(gc.join(1), Role::Closed));
    }
}
