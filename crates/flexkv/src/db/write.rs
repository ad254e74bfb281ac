//! The write path: a batch gets its sequence from the group-commit leader, large values
//! go to the value log, the group goes to the WAL as one record, and each writer puts
//! its own batch into the memtable, becomes visible in sequence order, and (for
//! [`Durability::Sync`](crate::Durability::Sync)) waits for the durable watermark.
//!
//! Order of a group, and why:
//! 1. value-log records, then the WAL record (the WAL entry points at them);
//! 2. leadership is handed on before any sync, so the next group is written while this
//!    one is on the device (pipelined horizontal batching);
//! 3. a sync syncs the value log before the WAL, so a durable WAL entry never points at
//!    a value that is not. Should the OS write WAL pages early on its own, recovery
//!    drops entries whose values did not survive (no writer was told they were durable).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::batch::BatchOp;
use super::Inner;
use crate::memtable::{replaced_in_batch, separated, BatchEntry, Memtable, Value};
use crate::vlog::Holder;
use crate::vlog::NewValue;
use crate::wal::format::{self, OpRef};
use crate::wal::group::Role;
use crate::{Durability, Error, Result, WriteBatch};

/// The most groups one leader writes in a row before handing leadership on.
const MAX_ROUNDS: usize = if option_env!("FLEXKV_ONE_ROUND").is_some() {
    1
} else {
    4
};

/// A batch waiting for a leader.
pub(crate) struct Request {
    ops: Vec<BatchOp>,
}

/// What the leader hands back: the batch's sequence and its entries as the memtable
/// will hold them.
pub(crate) struct Written {
    seq: u64,
    entries: Vec<BatchEntry>,
    /// The memtable that was active when the sequence was handed out: the batch goes
    /// there, so a frozen memtable holds exactly the batches of its WAL segments.
    table: Arc<Memtable>,
}

impl Inner {
    /// Writes `batch` and returns its sequence number.
    pub(crate) fn write(&self, batch: WriteBatch) -> Result<u64> {
        self.check_writable()?;
        if batch.db_id.is_some_and(|id| id != self.id) {
            return Err(Error::invalid(
                "the batch holds keyspaces of another database",
            ));
        }
        if batch.ops.is_empty() {
            return Ok(self.vis.visible());
        }
        self.make_room()?;
        let durability = batch.durability;
        let user_bytes = batch.bytes as u64;
        let req = Request { ops: batch.ops };
        let mut written = match self.group.join(req) {
            Role::Closed => return Err(Error::Closed),
            Role::Done(r) => r?,
            Role::Lead(me, group) => self.lead(me, group)?,
        };
        let seq = written.seq;
        let any_separated = || (written.entries.iter()).any(|(_, _, v)| separated(v).is_some());
        if written.entries.len() > 1 && any_separated() {
            // A batch that wrote a key twice: the first value is garbage now (only a
            // separated one needs telling the value log).
            let ops = (written.entries.iter()).map(|(ks, k, v)| (*ks, &k[..], separated(v)));
            for (p, key_len) in replaced_in_batch(ops) {
                self.vlog.hold(&p, key_len, Some(Holder::Memory), None);
            }
        }
        // In key order, each search starting where the last one ended; a key written
        // twice in the batch keeps its later value.
        written.table.insert_batch(seq, &mut written.entries);
        self.vis.applied_and_wait(seq);
        self.stats
            .user_bytes
            .fetch_add(user_bytes, Ordering::Relaxed);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        if durability == Durability::Sync {
            self.wait_durable(seq)?;
        }
        Ok(seq)
    }

    /// Waits until `seq` is durable, syncing if no sync is in flight.
    pub(crate) fn wait_durable(&self, seq: u64) -> Result<()> {
        let r = self.sync.wait_durable(
            seq,
            || self.group.busy(),
            || {
                self.vlog.sync()?;
                self.wal.sync()
            },
        );
        if r.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    /// Leads a group: writes it, hands the other members their results, and goes on
    /// leading whatever queued meanwhile (up to [`MAX_ROUNDS`] groups, so that a steady
    /// stream of buffered writers cannot keep a leader from its own acknowledgement).
    fn lead(&self, me: u64, group: Vec<(u64, Request)>) -> Result<Written> {
        let mut mine = None;
        let mut group = group;
        for round in 1.. {
            let others = self.write_round(me, group, &mut mine);
            let more = if round < MAX_ROUNDS {
                self.group.finish_or_continue(others)
            } else {
                self.group.finish(others);
                None
            };
            self.sync.nudge();
            match more {
                Some(g) => group = g,
                None => break,
            }
        }
        mine.unwrap_or_else(|| unreachable!("a leader's first group holds its own request"))
    }

    /// Writes one group; returns the results of every member but the leader, whose own
    /// result goes to `mine`.
    fn write_round(
        &self,
        me: u64,
        group: Vec<(u64, Request)>,
        mine: &mut Option<Result<Written>>,
    ) -> Vec<(u64, Result<Written>)> {
        let mut next = self.next_seq.lock();
        let first = *next + 1;
        let outcome = if self.poisoned.load(Ordering::Acquire) {
            Err(Error::Poisoned)
        } else {
            self.write_group(first, &group)
        };
        let mut others = Vec::with_capacity(group.len());
        match outcome {
            Ok(ptrs) => {
                let last = first + group.len() as u64 - 1;
                *next = last;
                self.sync.written(last);
                let table = Arc::clone(&self.tables.read().active);
                drop(next);
                let mut ptrs = ptrs.into_iter();
                for (i, (ticket, req)) in group.into_iter().enumerate() {
                    let seq = first + i as u64;
                    let entries = req
                        .ops
                        .into_iter()
                        .map(|op| {
                            let value = match op.value {
                                None => Value::Tombstone,
                                Some(v) if v.len() >= self.opts.value_threshold => {
                                    Value::Separated(ptrs.next().unwrap_or_else(|| {
                                        unreachable!("one pointer per separated value")
                                    }))
                                }
                                Some(v) => Value::Inline(v.into_boxed_slice()),
                            };
                            (op.ks, op.key, value)
                        })
                        .collect();
                    let w = Written {
                        seq,
                        entries,
                        table: Arc::clone(&table),
                    };
                    if ticket == me {
                        *mine = Some(Ok(w));
                    } else {
                        others.push((ticket, Ok(w)));
                    }
                }
            }
            Err(e) => {
                drop(next);
                self.poisoned.store(true, Ordering::Release);
                self.sync.fail();
                for (ticket, _) in group {
                    if ticket == me {
                        *mine = Some(Err(e.duplicate()));
                    } else {
                        others.push((ticket, Err(e.duplicate())));
                    }
                }
            }
        }
        others
    }

    /// Appends the group's separated values and its WAL record; returns the values'
    /// pointers in op order.
    fn write_group(
        &self,
        first: u64,
        group: &[(u64, Request)],
    ) -> Result<Vec<crate::vlog::Pointer>> {
        let threshold = self.opts.value_threshold;
        let mut separated = Vec::new();
        for (i, (_, req)) in group.iter().enumerate() {
            for op in &req.ops {
                if let Some(v) = op.value.as_ref().filter(|v| v.len() >= threshold) {
                    separated.push(NewValue {
                        ks: op.ks,
                        key: &op.key,
                        seq: first + i as u64,
                        value: v,
                    });
                }
            }
        }
        let ptrs = if separated.is_empty() {
            Vec::new()
        } else {
            self.vlog.append(&separated)?
        };
        let mut payload = self.wal_payload.lock();
        payload.clear();
        format::encode_group_header(&mut payload, self.sync.durable(), first, group.len() as u32);
        let mut next_ptr = ptrs.iter();
        for (_, req) in group {
            let ops = req.ops.iter().map(|op| match &op.value {
                None => OpRef::Delete {
                    ks: op.ks,
                    key: &op.key,
                },
                Some(v) if v.len() >= threshold => OpRef::PutSeparated {
                    ks: op.ks,
                    key: &op.key,
                    ptr: *next_ptr
                        .next()
                        .unwrap_or_else(|| unreachable!("one pointer per separated value")),
                },
                Some(v) => OpRef::Put {
                    ks: op.ks,
                    key: &op.key,
                    value: v,
                },
            });
            format::encode_batch(&mut payload, ops);
        }
        self.wal.append(&payload)?;
        crate::wal::keep_reusable(&mut payload);
        self.stats.groups.fetch_add(1, Ordering::Relaxed);
        self.stats
            .grouped_batches
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        self.stats
            .max_group
            .fetch_max(group.len() as u64, Ordering::Relaxed);
        Ok(ptrs)
    }
}
