//! Runs: the reports of one lane that follow each other in a burst, for one store, taken in
//! one loop ([`Pipeline::append_run`], [`Pipeline::keyed_run`]). A run starts where
//! [`Pipeline::handle_reports`] meets such a report and the store can take runs (the pipeline
//! is the only worker, and the store's collector has no rate limit); it ends at the first
//! datagram that is not one. Each report gets exactly what the report-by-report path would
//! give it: the same checks in the same order, the same counters (the tests compare the two,
//! frame by frame). Runs are out of line: each is entered once per run, and kept inline they
//! made the other primitives' loop spill registers. A keyed run also takes the Appends between
//! its reports, those of the Append store of the first Append it meets ([`KeyedRun::append`]):
//! in a mix of the two, runs are short, and a run's start and end cost more than a report. (A run of
//! postcards saved nothing over their lane: measured, not kept.)

use super::super::primitive::{AcceptDirect, Append};
use super::*;
use dta_proto::wire::report::ParseConfig;

impl Pipeline {
    /// Whether store `si` takes runs: the pipeline is the only worker (no report is another
    /// worker's) and the store's collector has no rate limit.
    #[inline(always)]
    fn takes_runs(&self, si: usize) -> bool {
        self.prim_cfg.shard.workers == 1 && self.buckets[self.stores[si].sender.collector].is_none()
    }

    /// The store an Append for `list` may start a run in ([`Pipeline::append_run`]): the
    /// Append store that holds the list, when the pipeline is the only worker, the store's
    /// collector has no rate limit and no cluster routes apply. `None`: the report takes
    /// [`Pipeline::dispatch_append`].
    #[inline(always)]
    pub(super) fn append_run_store(&self, list: u32) -> Option<usize> {
        if !self.append_routes.is_empty() {
            return None;
        }
        let si = match self.sole_append {
            Some(si) if self.stores[si].holds_list(list) => si,
            Some(_) => return None,
            None => self.append_store(list)?,
        };
        self.takes_runs(si).then_some(si)
    }

    /// Translates `first` (an Append already parsed and counted, for a list store `si` holds,
    /// [`Pipeline::append_run_store`]) and then the Appends that follow it in `rest`, for as
    /// long as they are Appends for lists of the same store; returns how many of `rest` it
    /// took. Each report gets exactly what [`Pipeline::dispatch_append`] would give it (the
    /// same checks in the same order, the same counters): under the run's conditions that is
    /// the entry's admission, the QP's gate and the entry joining its batch. What the run
    /// saves is the per-report lookups: the store, the worker and rate-limit checks, and the
    /// QP's room, asked again only after a batch was written or `tx` changed length (a NACK),
    /// since nothing else changes it while the clock stands still. Out of line: it is entered
    /// once per run, and kept inline it made the other primitives' loop spill registers.
    #[inline(never)]
    pub(super) fn append_run(
        &mut self,
        now: u64,
        si: usize,
        first: (ReportHeader, u32, Value),
        rest: &[Datagram<'_>],
        tx: &mut TxBatch,
    ) -> usize {
        let Store { sender, prim, .. } = &mut self.stores[si];
        let PrimitiveState::Append(a) = prim else {
            unreachable!("append_run_store picks an Append store");
        };
        let mut run = AppendRun::new(a, sender, now, self.max_frames_per_report);
        let c = &mut self.counters;
        run.entry(&first.0, first.1, &first.2, tx, c);
        for (taken, d) in rest.iter().enumerate() {
            // (A Sketch-Merge datagram is never an Append: its first byte is neither.)
            let Some((h, list, value)) = run.parse(d, &self.cfg.parse) else {
                return taken;
            };
            c.rx_datagrams += 1;
            c.reports_append += 1;
            note_sequence(&mut self.reporters, c, &self.cfg, &h, d.src, tx);
            run.entry(&h, list, &value, tx, c);
        }
        rest.len()
    }

    /// The store a Key-Write or Key-Increment `r` may start a run in ([`Pipeline::keyed_run`]):
    /// the one store its primitive's route names, when the pipeline is the only worker and the
    /// store's collector has no rate limit. `None`: the report takes [`Pipeline::dispatch`].
    #[inline(always)]
    pub(super) fn keyed_run_store(&self, r: &Report) -> Option<usize> {
        let route = match r.primitive {
            Primitive::KeyWrite { .. } => &self.cfg.route_keywrite,
            Primitive::KeyIncrement { .. } => &self.cfg.route_keyincrement,
            _ => return None,
        };
        let Route::Single(si) = *route else {
            return None;
        };
        let s = self.stores.get(si)?;
        let runs = self.takes_runs(si)
            && matches!(
                (&s.prim, &r.primitive),
                (PrimitiveState::KeyWrite(_), Primitive::KeyWrite { .. })
                    | (
                        PrimitiveState::KeyIncrement(_),
                        Primitive::KeyIncrement { .. }
                    )
            );
        runs.then_some(si)
    }

    /// Translates `first` (a Key-Write or Key-Increment already parsed, counted and
    /// sequence-tracked, whose store `si` is, [`Pipeline::keyed_run_store`]) and then the
    /// reports of the same primitive that follow it in `rest`; returns how many of `rest` it
    /// took. Each report gets exactly what [`Pipeline::dispatch`] would give it (the same
    /// checks in the same order, the same counters): under the run's conditions that is the
    /// store's admission, the QP's gate and the store's accept. What the run saves is the
    /// per-report route, worker and rate-limit decisions and the primitive's dispatch, and the
    /// other lanes' tests on each datagram. Out of line, as [`Pipeline::append_run`].
    #[inline(never)]
    pub(super) fn keyed_run(
        &mut self,
        now: u64,
        si: usize,
        first: &mut Report,
        rest: &[Datagram<'_>],
        tx: &mut TxBatch,
    ) -> usize {
        // The Appends of an Append store that takes runs join the run: in a mix of
        // primitives a run would otherwise end at each of them, and each run's start and end
        // cost more than a report's translation. Such a run is a function of its own: in one
        // function with the plain run, Key-Write cost 8 and Key-Increment 8 more instructions
        // a report (registers allocated differently), though the plain run never meets an
        // Append.
        let joins = self.has_appends && self.append_routes.is_empty();
        struct Run<'a, 'b, const JOIN: bool> {
            p: &'a mut Pipeline,
            now: u64,
            si: usize,
            first: &'a mut Report,
            rest: &'a [Datagram<'b>],
            tx: &'a mut TxBatch,
        }
        impl<const JOIN: bool> dta_proto::cpu::Leveled for Run<'_, '_, JOIN> {
            type Output = usize;
            #[inline(always)]
            fn run(self) -> usize {
                self.p
                    .keyed_run_in::<JOIN>(self.now, self.si, self.first, self.rest, self.tx)
            }
        }
        macro_rules! run {
            ($join:literal) => {
                dta_proto::cpu::with_v3(Run::<$join> {
                    p: self,
                    now,
                    si,
                    first,
                    rest,
                    tx,
                })
            };
        }
        if joins {
            run!(true)
        } else {
            run!(false)
        }
    }

    /// [`Pipeline::keyed_run`]'s body, which `Run::run` inlines into each copy; `JOIN`: the
    /// Appends of an Append store that takes runs join the run ([`LazyAppends`]). (The body
    /// written in `Run::run` itself, over the struct's fields, cost Key-Write 9 and
    /// Key-Increment 4 more instructions a report: hence the repeated signature.)
    #[inline(always)]
    fn keyed_run_in<const JOIN: bool>(
        &mut self,
        now: u64,
        si: usize,
        first: &mut Report,
        rest: &[Datagram<'_>],
        tx: &mut TxBatch,
    ) -> usize {
        let frames = self.max_frames_per_report;
        let (c, reporters, cfg) = (&mut self.counters, &mut self.reporters, &self.cfg);
        macro_rules! go {
            ($sender:expr, $prim:expr, $appends:expr) => {{
                let sender = $sender;
                let mut run = KeyedRun {
                    budget: sender.direct_budget(frames, tx),
                    sender,
                    appends: $appends,
                    c,
                    reporters,
                    cfg,
                    now,
                    frames,
                };
                match $prim {
                    PrimitiveState::KeyWrite(p) => {
                        run.go(p, first, rest, tx, |c| c.reports_keywrite += 1)
                    }
                    PrimitiveState::KeyIncrement(p) => {
                        run.go(p, first, rest, tx, |c| c.reports_keyincrement += 1)
                    }
                    _ => unreachable!("keyed_run_store picks a Key-Write or Key-Increment store"),
                }
            }};
        }
        if !JOIN {
            let Store { sender, prim, .. } = &mut self.stores[si];
            return go!(sender, prim, NoAppends);
        }
        // The stores before and after the keyed one: an Append run is bound to one of them
        // when the run meets its first Append.
        let (low, high) = self.stores.split_at_mut(si);
        let (keyed, high) = high.split_first_mut().expect("the keyed store");
        go!(
            &mut keyed.sender,
            &mut keyed.prim,
            LazyAppends::Unbound {
                low,
                high,
                now,
                frames,
            }
        )
    }
}

/// The state of one [`Pipeline::append_run`]: the store's batches and QP, and whether the QP
/// can take a report, with `tx`'s length when that was asked.
struct AppendRun<'a> {
    a: &'a mut Append,
    sender: &'a mut QpSender,
    now: u64,
    frames: usize,
    room: Option<(bool, usize)>,
}

impl<'a> AppendRun<'a> {
    fn new(a: &'a mut Append, sender: &'a mut QpSender, now: u64, frames: usize) -> Self {
        AppendRun {
            a,
            sender,
            now,
            frames,
            room: None,
        }
    }

    /// `d`'s header and fields when it is an Append for a list of the run's store.
    #[inline(always)]
    fn parse(&self, d: &Datagram<'_>, cfg: &ParseConfig) -> Option<(ReportHeader, u32, Value)> {
        parse_append_fast(d.payload, cfg).filter(|(_, list, _)| self.a.serves(*list))
    }

    /// One Append of the run: admitted, gated and batched as [`Pipeline::dispatch_append`]
    /// would.
    #[inline(always)]
    fn entry(
        &mut self,
        h: &ReportHeader,
        list: u32,
        value: &Value,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        match self.a.admit_entry(list, value) {
            Err(why) => why.count(c),
            Ok(_) if self.sender.qp.is_broken() => c.drop_qp_broken += 1,
            Ok((li, _)) => {
                let can = match self.room {
                    Some((can, len)) if len == tx.len() => can,
                    _ => {
                        let can = self.sender.can_take(self.now, self.frames, tx);
                        self.room = Some((can, tx.len()));
                        can
                    }
                };
                if !can {
                    c.drop_qp_queue_full += 1;
                } else if self
                    .a
                    .accept_entry(self.now, li, value, h.immediate, self.sender, tx, c)
                {
                    // A batch was written: the QP's room changed.
                    self.room = None;
                }
            }
        }
    }
}

/// The state of one [`Pipeline::keyed_run`]: the store's QP and what sequence tracking needs.
struct KeyedRun<'a, A> {
    sender: &'a mut QpSender,
    /// The Appends this run takes ([`LazyAppends`], [`KeyedRun::append`]), or
    /// [`NoAppends`].
    appends: A,
    c: &'a mut TranslatorCounters,
    reporters: &'a mut ReporterTracker,
    cfg: &'a PipelineConfig,
    now: u64,
    frames: usize,
    /// Frames that may still go straight into `tx` ([`QpSender::direct_budget`]), or fewer:
    /// while it covers a report's `frames`, the report is admitted without asking the QP
    /// and its frames go out without asking it again ([`AcceptDirect`]).
    budget: usize,
}

/// What a [`KeyedRun`] does with a datagram it cannot parse: an [`AppendRun`] takes it when it
/// is an Append for a store that takes runs.
trait JoinAppends<'a> {
    /// Whether the run takes Appends at all.
    const JOINS: bool;
    /// The Append run for `list`, if the run takes Appends for it.
    fn run(&mut self, list: u32) -> Option<&mut AppendRun<'a>>;
}

/// A keyed run that ends at its first datagram of another primitive.
struct NoAppends;

impl<'a> JoinAppends<'a> for NoAppends {
    const JOINS: bool = false;
    #[inline(always)]
    fn run(&mut self, _: u32) -> Option<&mut AppendRun<'a>> {
        None
    }
}

/// The Appends a keyed run takes: those of the Append store of the first Append it meets.
/// That store takes runs as the keyed one does ([`Pipeline::takes_runs`]): one worker, and no
/// rate limit, which is the pipeline's (`[overload] messages_per_sec`) and so on every
/// collector or on none. Bound at that Append; an Append for another store ends the run.
enum LazyAppends<'a> {
    /// No Append yet: the stores besides the run's keyed store.
    Unbound {
        low: &'a mut [Store],
        high: &'a mut [Store],
        now: u64,
        frames: usize,
    },
    /// Bound to one store.
    Bound(AppendRun<'a>),
    /// While binding.
    Spent,
}

impl<'a> JoinAppends<'a> for LazyAppends<'a> {
    const JOINS: bool = true;
    #[inline(always)]
    fn run(&mut self, list: u32) -> Option<&mut AppendRun<'a>> {
        if let LazyAppends::Unbound { low, high, .. } = self {
            // The store holding the list (`Pipeline::append_store`, over the two halves).
            let at = low
                .iter()
                .chain(high.iter())
                .position(|s| s.holds_list(list))?;
            let LazyAppends::Unbound {
                low,
                high,
                now,
                frames,
                ..
            } = std::mem::replace(self, LazyAppends::Spent)
            else {
                unreachable!("unbound above");
            };
            let store = if at < low.len() {
                &mut low[at]
            } else {
                &mut high[at - low.len()]
            };
            let Store {
                sender,
                prim: PrimitiveState::Append(a),
                ..
            } = store
            else {
                unreachable!("an Append store above");
            };
            *self = LazyAppends::Bound(AppendRun::new(a, sender, now, frames));
        }
        match self {
            LazyAppends::Bound(run) if run.a.serves(list) => Some(run),
            _ => None,
        }
    }
}

impl<'a, A: JoinAppends<'a>> KeyedRun<'a, A> {
    /// Translates `first` and the reports in `rest` of the same primitive, read in place by
    /// [`parse_keyed_into`] and counted by `count`; returns how many of `rest` it took. Any
    /// other datagram ends the run (the caller parses it again, and counts its error if it
    /// has one).
    #[inline(always)]
    fn go<P: AcceptDirect>(
        &mut self,
        p: &mut P,
        first: &mut Report,
        rest: &[Datagram<'_>],
        tx: &mut TxBatch,
        count: impl Fn(&mut TranslatorCounters),
    ) -> usize {
        self.report(p, first, tx);
        for (taken, d) in rest.iter().enumerate() {
            if !parse_keyed_into(d.payload, &self.cfg.parse, first) {
                if self.append(d, tx) {
                    continue;
                }
                return taken;
            }
            count(self.c);
            self.c.rx_datagrams += 1;
            let queued = tx.len();
            note_sequence(self.reporters, self.c, self.cfg, &first.header, d.src, tx);
            // A NACK takes a place in `tx`.
            self.budget = self.budget.saturating_sub(tx.len() - queued);
            self.report(p, first, tx);
        }
        rest.len()
    }

    /// `d` when it is an Append the run takes ([`KeyedRun::appends`]): counted,
    /// sequence-tracked and batched as the Append lane and [`Pipeline::append_run`] give it,
    /// and true. False for anything else (the run ends there).
    #[inline(always)]
    fn append(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> bool {
        if !A::JOINS {
            return false;
        }
        let Some((h, list, value)) = parse_append_fast(d.payload, &self.cfg.parse) else {
            return false;
        };
        let Some(run) = self.appends.run(list) else {
            return false;
        };
        self.c.rx_datagrams += 1;
        self.c.reports_append += 1;
        let queued = tx.len();
        note_sequence(self.reporters, self.c, self.cfg, &h, d.src, tx);
        run.entry(&h, list, &value, tx, self.c);
        // A NACK or a batch takes a place in `tx`.
        self.budget = self.budget.saturating_sub(tx.len() - queued);
        true
    }

    /// One report of the run: admitted, gated and accepted as [`Pipeline::dispatch`] would.
    #[inline(always)]
    fn report<P: AcceptDirect>(&mut self, p: &mut P, r: &Report, tx: &mut TxBatch) {
        let c = &mut *self.c;
        match p.admit(r, self.cfg.max_redundancy) {
            Err(why) => why.count(c),
            Ok(_) if self.budget >= self.frames => {
                self.budget -= p.accept_direct(self.now, r, self.sender, tx, c);
            }
            Ok(_) => {
                if self.sender.admits(self.now, self.frames, tx, c) {
                    p.accept(self.now, r, NO_HINT, self.sender, tx, c);
                    self.budget = self.sender.direct_budget(self.frames, tx);
                }
            }
        }
    }
}
