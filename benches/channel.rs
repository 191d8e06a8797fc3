//! Criterion benchmarks of the net channel (`netchannel::channel`) against its anchors, measured in the
//! same run: [`rtrb`], [`nexus_queue`] (its SPSC ring), [`crossbeam_queue::ArrayQueue`],
//! `std::sync::mpsc::sync_channel` and, for the latency benchmarks, a bare atomic ping-pong and
//! `std::thread::park`/`unpark`.
//!
//! Every benchmark uses two threads: the Criterion (main) thread, pinned to CPU 0, and one worker thread
//! per `iter_custom` call, pinned to CPU 1 (pinning is best effort). Items are `u32`, every queue has a
//! capacity of 4096. The worker is spawned and handed its queue ends before the clock starts, and the
//! clock starts only once the worker reports that it is running, so thread start-up is never timed.
//!
//! * `throughput/<contender>/<burst>`: the main thread produces `iters * burst` items in bursts of
//!   `burst`; the worker consumes them in bursts of at most `burst` and sums them (the sum is checked).
//!   Time runs from the first push to the consumer's last pop (both read the same monotonic clock);
//!   Criterion reports time per item (`Throughput::Elements(burst)` per iteration). Both sides
//!   busy-poll. `netchannel-park` is a [`WakeMode::Park`] channel whose consumer stays awake, so the
//!   producer pays the wakeup check on every burst ("wakeups enabled"); `netchannel-poll` is
//!   [`WakeMode::Poll`], which skips it. `*-single` contenders use the one-item API (`push`/`pop`) in a
//!   loop; `rtrb-chunk` uses `write_chunk_uninit`/`read_chunk`; nexus-queue, ArrayQueue and mpsc have
//!   only one-item operations (`push`/`pop`, `try_send`/`try_recv`).
//! * `throughput_slow_producer/<contender>/<burst>` and `throughput_slow_consumer/...`: the same with
//!   [`WORK_STEPS`] dependent multiply-adds (~5 ns) per item on the producer (the ring runs near empty,
//!   the consumer spinning) or on the consumer (the ring runs near full, the producer retrying), for the
//!   net channel with wakeups enabled and its two SPSC anchors, at bursts 1 and 32. Here one side's own
//!   work bounds every ring; what is measured is how much each ring adds to it.
//! * `ping_pong/<contender>`: one item main -> worker on channel A, echoed worker -> main on channel B;
//!   both sides busy-poll; one iteration is one round trip. `bare-atomic` is two `AtomicUsize`s on
//!   separate `CachePadded` lines, each thread spinning on the other's: the cost of moving the two cache
//!   lines, the physical limit for any channel.
//! * `wakeup/<contender>`: the worker sleeps until woken: `netchannel-park-spin20us` and
//!   `netchannel-eventfd-spin20us` block in `Consumer::wait(None)` (futex, and `poll(2)` on the
//!   eventfd) after the builder's default spin ([`SPIN`], 20 us of polling before arming the wakeup);
//!   `netchannel-park-nospin` is Park with no spin. The anchors block in `std::thread::park` (a bare
//!   futex) at once (`thread-park`) or after polling their mailbox for the same [`SPIN`]
//!   (`thread-park-spin20us`), and in `mpsc::Receiver::recv`. Compare like with like: a spinning
//!   contender with a spinning anchor, a non-spinning one with a non-spinning one. Before each round trip the main
//!   thread waits (untimed) until `/proc` shows the worker in state `S` (asleep); then it times push ->
//!   worker wakes -> worker pops and replies on a second, [`WakeMode::Poll`] net channel that the main
//!   thread busy-polls. The reply path is the same for every contender.
//! * `wakeup_back_to_back/<contender>`: the same sleeping workers, but the main thread sends the next
//!   item as soon as the reply arrives, so each round trip also pays whatever the worker does between
//!   finding its queue empty and falling asleep (for the net channel, arming the wakeup:
//!   `Consumer::request_wakeup`, with its `membarrier(2)`). A request/response server whose consumer
//!   sleeps when idle lives here.
//!
//! Run with `cargo bench -p netchannels-benches --bench channel`; `BENCHMARKS.md` records the results. On a noisy machine,
//! `NETCHANNEL_BENCH_INTERLEAVE=<rounds> cargo bench -p netchannels-benches --bench channel [-- <filter>...]` runs the same
//! cases without Criterion, round-robin in 50 ms slices, and prints medians and per-round paired ratios
//! (each ratio compares two measurements taken moments apart, so bursts of load, and the hypervisor
//! moving the two vCPUs closer or further apart, disturb both sides alike).

use std::fs::File;
use std::hint::spin_loop;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

mod common;
use common::pin_to_cpu;

use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use netchannel::channel::{Channel, Consumer, Producer, WakeMode};
use rtrb::{CopyToUninit, RingBuffer};

/// Slots in every queue under test.
const CAPACITY: usize = 4096;
/// The CPU the Criterion (producing / pinging) thread runs on.
const MAIN_CPU: usize = 0;
/// The CPU every worker (consuming / echoing) thread runs on.
const WORKER_CPU: usize = 1;
/// Burst sizes of the throughput benchmark.
const BURSTS: [usize; 3] = [1, 32, 256];
/// Burst sizes of the slow-producer and slow-consumer throughput benchmarks.
const REGIME_BURSTS: [usize; 2] = [1, 32];
/// Dependent multiply-add steps per item on the slow side of the regime benchmarks (~1.3 ns each).
const WORK_STEPS: u32 = 4;

// ---------------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------------

/// Spawns the worker thread, pinned to [`WORKER_CPU`].
fn spawn_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    thread::Builder::new()
        .name("bench-worker".into())
        .spawn(move || {
            pin_to_cpu(WORKER_CPU);
            f()
        })
        .expect("spawn the benchmark worker")
}

/// A one-shot "the worker is running" flag: the clock starts only after the worker sets it.
#[derive(Clone, Default)]
struct Ready(Arc<AtomicBool>);

impl Ready {
    fn set(&self) {
        // Release: pairs with the Acquire load in `wait`; orders nothing but the handshake itself.
        self.0.store(true, Ordering::Release);
    }

    fn wait(&self) {
        // Acquire: pairs with the Release store in `set`.
        while !self.0.load(Ordering::Acquire) {
            spin_loop();
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The contenders, behind one burst-shaped interface
// ---------------------------------------------------------------------------------------------------

/// The sending half of a contender: enqueue a prefix of `items`, return how many were taken (0 when
/// full). Never blocks.
trait Tx: Send + 'static {
    fn send(&mut self, items: &[u32]) -> usize;
}

/// The receiving half: dequeue up to `out.len()` items into `out`, return how many (0 when empty).
/// Never blocks.
trait Rx: Send + 'static {
    fn recv(&mut self, out: &mut [u32]) -> usize;
}

/// Sends a prefix of `items` one at a time with `push` (true when taken); returns how many were taken.
#[inline(always)]
fn send_each(items: &[u32], mut push: impl FnMut(u32) -> bool) -> usize {
    items.iter().position(|&item| !push(item)).unwrap_or(items.len())
}

/// Fills a prefix of `out` one item at a time with `pop`; returns how many it filled.
#[inline(always)]
fn recv_each(out: &mut [u32], mut pop: impl FnMut() -> Option<u32>) -> usize {
    for (n, slot) in out.iter_mut().enumerate() {
        match pop() {
            Some(item) => *slot = item,
            None => return n,
        }
    }
    out.len()
}

/// Net channel through its burst API (`push_burst` / `pop_burst`).
struct NcBurst<T>(T);

impl Tx for NcBurst<Producer> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        self.0.push_burst(items)
    }
}

impl Rx for NcBurst<Consumer> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        self.0.pop_burst(out)
    }
}

/// Net channel through its one-item API (`push` / `pop`), one call per item.
struct NcSingle<T>(T);

impl Tx for NcSingle<Producer> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        send_each(items, |item| self.0.push(item).is_ok())
    }
}

impl Rx for NcSingle<Consumer> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        recv_each(out, || self.0.pop())
    }
}

/// rtrb through its chunk API (`write_chunk_uninit` / `read_chunk`), taking a partial chunk when fewer
/// slots than asked are available, as `push_burst` / `pop_burst` do.
struct RtrbChunk<T>(T);

impl Tx for RtrbChunk<rtrb::Producer<u32>> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        let mut chunk = match self.0.write_chunk_uninit(items.len()) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => return 0,
            Err(rtrb::chunks::ChunkError::TooFewSlots(free)) => {
                self.0.write_chunk_uninit(free).expect("free slots stay free")
            }
        };
        let (first, second) = chunk.as_mut_slices();
        let mid = first.len();
        let n = mid + second.len();
        items[..mid].copy_to_uninit(first);
        items[mid..n].copy_to_uninit(second);
        // SAFETY: both slices of the chunk were initialized by the two copies above.
        unsafe { chunk.commit_all() };
        n
    }
}

impl Rx for RtrbChunk<rtrb::Consumer<u32>> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        let chunk = match self.0.read_chunk(out.len()) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => return 0,
            Err(rtrb::chunks::ChunkError::TooFewSlots(ready)) => {
                self.0.read_chunk(ready).expect("ready items stay ready")
            }
        };
        let (first, second) = chunk.as_slices();
        let mid = first.len();
        let n = mid + second.len();
        out[..mid].copy_from_slice(first);
        out[mid..n].copy_from_slice(second);
        chunk.commit_all();
        n
    }
}

/// rtrb through its one-item API (`push` / `pop`).
struct RtrbSingle<T>(T);

impl Tx for RtrbSingle<rtrb::Producer<u32>> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        send_each(items, |item| self.0.push(item).is_ok())
    }
}

impl Rx for RtrbSingle<rtrb::Consumer<u32>> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        recv_each(out, || self.0.pop().ok())
    }
}

/// nexus-queue's SPSC ring, one `push`/`pop` per item (it has no burst API).
struct Nexus<T>(T);

impl Tx for Nexus<nexus_queue::spsc::Producer<u32>> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        send_each(items, |item| self.0.push(item).is_ok())
    }
}

impl Rx for Nexus<nexus_queue::spsc::Consumer<u32>> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        recv_each(out, || self.0.pop())
    }
}

/// crossbeam's bounded MPMC `ArrayQueue`, one `push`/`pop` per item (it has no burst API).
struct Crossbeam(Arc<ArrayQueue<u32>>);

impl Tx for Crossbeam {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        send_each(items, |item| self.0.push(item).is_ok())
    }
}

impl Rx for Crossbeam {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        recv_each(out, || self.0.pop())
    }
}

/// `std::sync::mpsc::sync_channel(4096)`, one non-blocking `try_send`/`try_recv` per item.
struct StdSync<T>(T);

impl Tx for StdSync<mpsc::SyncSender<u32>> {
    #[inline]
    fn send(&mut self, items: &[u32]) -> usize {
        send_each(items, |item| self.0.try_send(item).is_ok())
    }
}

impl Rx for StdSync<mpsc::Receiver<u32>> {
    #[inline]
    fn recv(&mut self, out: &mut [u32]) -> usize {
        recv_each(out, || self.0.try_recv().ok())
    }
}

fn netchannel(mode: WakeMode) -> (Producer, Consumer) {
    Channel::builder(CAPACITY).wake(mode).build().expect("build a net channel")
}

fn nc_burst(mode: WakeMode) -> (NcBurst<Producer>, NcBurst<Consumer>) {
    let (tx, rx) = netchannel(mode);
    (NcBurst(tx), NcBurst(rx))
}

fn nc_single(mode: WakeMode) -> (NcSingle<Producer>, NcSingle<Consumer>) {
    let (tx, rx) = netchannel(mode);
    (NcSingle(tx), NcSingle(rx))
}

fn rtrb_chunk() -> (RtrbChunk<rtrb::Producer<u32>>, RtrbChunk<rtrb::Consumer<u32>>) {
    let (tx, rx) = RingBuffer::new(CAPACITY);
    (RtrbChunk(tx), RtrbChunk(rx))
}

fn rtrb_single() -> (RtrbSingle<rtrb::Producer<u32>>, RtrbSingle<rtrb::Consumer<u32>>) {
    let (tx, rx) = RingBuffer::new(CAPACITY);
    (RtrbSingle(tx), RtrbSingle(rx))
}

fn nexus() -> (Nexus<nexus_queue::spsc::Producer<u32>>, Nexus<nexus_queue::spsc::Consumer<u32>>) {
    let (tx, rx) = nexus_queue::spsc::ring_buffer(CAPACITY);
    (Nexus(tx), Nexus(rx))
}

fn crossbeam() -> (Crossbeam, Crossbeam) {
    let q = Arc::new(ArrayQueue::new(CAPACITY));
    (Crossbeam(Arc::clone(&q)), Crossbeam(q))
}

fn std_sync() -> (StdSync<mpsc::SyncSender<u32>>, StdSync<mpsc::Receiver<u32>>) {
    let (tx, rx) = mpsc::sync_channel(CAPACITY);
    (StdSync(tx), StdSync(rx))
}

/// Fills and drains the queue once on the calling thread so that every slot has been touched (no page
/// faults or cold misses on the first lap of the timed run).
fn prime(tx: &mut impl Tx, rx: &mut impl Rx) {
    let items = [0u32; 256];
    let mut out = [0u32; 256];
    let mut pushed = 0;
    while pushed < CAPACITY {
        let n = tx.send(&items);
        assert!(n > 0, "an empty queue refused items");
        pushed += n;
    }
    let mut popped = 0;
    while popped < pushed {
        popped += rx.recv(&mut out);
    }
    assert_eq!(rx.recv(&mut out), 0, "the queue holds more than was pushed");
}

// ---------------------------------------------------------------------------------------------------
// 1. Throughput
// ---------------------------------------------------------------------------------------------------

/// The wrapping sum of `i as u32` for `i` in `0..n`, as the consumer computes it.
fn expected_sum(n: u64) -> u64 {
    let cycle = 1u128 << 32;
    let (full, rest) = (u128::from(n) / cycle, u128::from(n) % cycle);
    let sum = full * (cycle * (cycle - 1) / 2) + rest * rest.saturating_sub(1) / 2;
    #[expect(clippy::cast_possible_truncation, reason = "the consumer's sum wraps at 2^64 too")]
    let sum = sum as u64;
    sum
}

/// Which side of a throughput run does per-item work of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Regime {
    /// Neither: both threads run flat out.
    Free,
    /// The producer: the ring runs near empty.
    SlowProducer,
    /// The consumer: the ring runs near full.
    SlowConsumer,
}

impl Regime {
    fn group(self) -> &'static str {
        match self {
            Self::Free => "throughput",
            Self::SlowProducer => "throughput_slow_producer",
            Self::SlowConsumer => "throughput_slow_consumer",
        }
    }

    /// `steps` dependent multiply-adds on `x` when `side` is the slow one; `x` itself otherwise.
    #[inline(always)]
    fn work(self, side: Self, x: u64) -> u64 {
        if self != side {
            return x;
        }
        let mut x = x;
        for _ in 0..std::hint::black_box(WORK_STEPS) {
            x = x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(0x1405_7b7e_f767_814f);
        }
        x
    }
}

/// Moves `iters * burst` items from this thread to a worker in bursts of `burst`; returns the time from
/// the first push to the worker's last pop.
fn throughput_run<T: Tx, R: Rx>(iters: u64, burst: usize, pair: (T, R)) -> Duration {
    throughput_regime_run(iters, burst, Regime::Free, pair)
}

/// [`throughput_run`] with `regime`'s per-item work on one side.
fn throughput_regime_run<T: Tx, R: Rx>(
    iters: u64,
    burst: usize,
    regime: Regime,
    (mut tx, mut rx): (T, R),
) -> Duration {
    prime(&mut tx, &mut rx);
    let total = iters * burst as u64;
    let ready = Ready::default();
    let consumer = {
        let ready = ready.clone();
        spawn_worker(move || {
            let mut out = vec![0u32; burst];
            let mut got = 0u64;
            let mut sum = 0u64;
            let mut acc = 0u64;
            ready.set();
            while got < total {
                let n = rx.recv(&mut out);
                if n == 0 {
                    spin_loop();
                    continue;
                }
                for &item in &out[..n] {
                    sum = sum.wrapping_add(u64::from(item));
                    acc = regime.work(Regime::SlowConsumer, acc ^ u64::from(item));
                }
                got += n as u64;
            }
            std::hint::black_box(acc);
            (Instant::now(), sum, got)
        })
    };
    let mut items = vec![0u32; burst];
    ready.wait();
    let start = Instant::now();
    let mut next = 0u32;
    let mut sent = 0u64;
    let mut acc = 0u64;
    while sent < total {
        let want = usize::try_from(total - sent).map_or(burst, |left| left.min(burst));
        for (k, slot) in items[..want].iter_mut().enumerate() {
            #[expect(clippy::cast_possible_truncation, reason = "k < burst <= 256")]
            let k = k as u32;
            *slot = next.wrapping_add(k);
            acc = regime.work(Regime::SlowProducer, acc ^ u64::from(*slot));
        }
        let mut off = 0;
        while off < want {
            let n = tx.send(&items[off..want]);
            if n == 0 {
                spin_loop();
            }
            off += n;
        }
        #[expect(clippy::cast_possible_truncation, reason = "want <= 256")]
        let want32 = want as u32;
        next = next.wrapping_add(want32);
        sent += want as u64;
    }
    std::hint::black_box(acc);
    let (end, sum, got) = consumer.join().expect("consumer thread");
    assert_eq!(got, total, "consumer saw a different number of items");
    assert_eq!(sum, expected_sum(total), "consumer saw different items");
    end.duration_since(start)
}

// ---------------------------------------------------------------------------------------------------
// 2. Busy-polling ping-pong
// ---------------------------------------------------------------------------------------------------

/// `iters` round trips of one item: this thread sends on A and spins on B, the worker echoes A into B.
fn ping_pong_run<T: Tx, R: Rx>(
    iters: u64,
    (mut a_tx, mut a_rx): (T, R),
    (mut b_tx, mut b_rx): (T, R),
) -> Duration {
    prime(&mut a_tx, &mut a_rx);
    prime(&mut b_tx, &mut b_rx);
    let ready = Ready::default();
    let echo = {
        let ready = ready.clone();
        spawn_worker(move || {
            let mut item = [0u32; 1];
            ready.set();
            for _ in 0..iters {
                while a_rx.recv(&mut item) == 0 {
                    spin_loop();
                }
                while b_tx.send(&item) == 0 {
                    spin_loop();
                }
            }
        })
    };
    let mut back = [0u32; 1];
    ready.wait();
    let start = Instant::now();
    for i in 0..iters {
        #[expect(clippy::cast_possible_truncation, reason = "any value will do; it is checked on return")]
        let ping = [i as u32];
        while a_tx.send(&ping) == 0 {
            spin_loop();
        }
        while b_rx.recv(&mut back) == 0 {
            spin_loop();
        }
        assert_eq!(back, ping);
    }
    let elapsed = start.elapsed();
    echo.join().expect("echo thread");
    elapsed
}

/// The physical limit: two counters on separate cache lines, each side spinning on the other's.
fn bare_atomic_run(iters: u64) -> Duration {
    let lines = Arc::new((CachePadded::new(AtomicUsize::new(0)), CachePadded::new(AtomicUsize::new(0))));
    let ready = Ready::default();
    let iters = usize::try_from(iters).expect("iteration count fits usize");
    let echo = {
        let lines = Arc::clone(&lines);
        let ready = ready.clone();
        spawn_worker(move || {
            let (ping, pong) = &*lines;
            ready.set();
            for i in 1..=iters {
                // Acquire/Release: pairs with the main thread's Release store / Acquire load; the round
                // trip is the handshake itself.
                while ping.load(Ordering::Acquire) != i {
                    spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        })
    };
    let (ping, pong) = &*lines;
    ready.wait();
    let start = Instant::now();
    for i in 1..=iters {
        // Release/Acquire: pairs with the worker's Acquire load / Release store.
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            spin_loop();
        }
    }
    let elapsed = start.elapsed();
    echo.join().expect("echo thread");
    elapsed
}

// ---------------------------------------------------------------------------------------------------
// 3. Wakeup round trip with the consumer asleep
// ---------------------------------------------------------------------------------------------------

/// Round trips whose worker was not seen asleep within [`SLEEP_WAIT_LIMIT`] before the push, and round
/// trips in total; printed after the run so a reader can tell that the worker really slept.
static NOT_ASLEEP: AtomicU64 = AtomicU64::new(0);
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// How long the main thread waits for the worker to fall asleep before timing a round trip anyway.
const SLEEP_WAIT_LIMIT: Duration = Duration::from_millis(20);

/// Reads a thread's scheduler state (`R`, `S`, ...) from `/proc/<pid>/task/<tid>/stat`.
struct ThreadState {
    stat: File,
    buf: [u8; 512],
}

impl ThreadState {
    /// Opens the calling thread's `stat` file, to be read from another thread.
    fn of_current_thread() -> Self {
        let task = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        let stat = File::open(std::path::Path::new("/proc").join(task).join("stat")).expect("open stat");
        Self { stat, buf: [0; 512] }
    }

    /// Whether the thread is asleep (interruptible sleep, which futex waits and `poll(2)` are).
    fn is_asleep(&mut self) -> bool {
        let Ok(n) = self.stat.read_at(&mut self.buf, 0) else {
            return false;
        };
        // "pid (comm) S ...": the state follows the last ')'.
        let line = &self.buf[..n];
        line.iter().rposition(|&b| b == b')').and_then(|p| line.get(p + 2)) == Some(&b'S')
    }

    /// Spins until the thread is asleep or [`SLEEP_WAIT_LIMIT`] passes; returns whether it slept.
    fn wait_until_asleep(&mut self) -> bool {
        let deadline = Instant::now() + SLEEP_WAIT_LIMIT;
        while Instant::now() < deadline {
            if self.is_asleep() {
                return true;
            }
            spin_loop();
        }
        false
    }
}

/// `iters` wakeup round trips. `spawn_sleeper` starts the worker with the reply producer and a sender for
/// its [`ThreadState`], and returns the worker and the main thread's `poke` (which sends one item to the
/// sleeping worker). The worker must reply with the same item and exit once `poke` is dropped.
fn wakeup_run<P: FnMut(u32)>(
    iters: u64,
    asleep: bool,
    spawn_sleeper: impl FnOnce(Producer, mpsc::Sender<ThreadState>) -> (JoinHandle<()>, P),
) -> Duration {
    let (reply_tx, mut reply_rx) = netchannel(WakeMode::Poll);
    let (state_tx, state_rx) = mpsc::channel();
    let (worker, mut poke) = spawn_sleeper(reply_tx, state_tx);
    let mut state = state_rx.recv().expect("worker's thread state");
    let mut elapsed = Duration::ZERO;
    let mut not_asleep = 0;
    for i in 0..iters {
        // Nonzero, so the park/unpark anchor can use 0 as "no item".
        let item = (i % 1_000_000) as u32 + 1;
        if asleep && !state.wait_until_asleep() {
            not_asleep += 1;
        }
        let start = Instant::now();
        poke(item);
        let reply = loop {
            if let Some(reply) = reply_rx.pop() {
                break reply;
            }
            spin_loop();
        };
        elapsed += start.elapsed();
        assert_eq!(reply, item);
    }
    drop(poke);
    worker.join().expect("sleeper thread");
    // Relaxed: statistics read after the run.
    if asleep {
        NOT_ASLEEP.fetch_add(not_asleep, Ordering::Relaxed);
        ROUND_TRIPS.fetch_add(iters, Ordering::Relaxed);
    }
    elapsed
}

/// How long a spinning contender polls before it sleeps: the net channel's default
/// (`Builder::spin`), given to the spinning `thread::park` anchor too.
const SPIN: Duration = netchannel::channel::DEFAULT_SPIN;

/// A net channel whose consumer sleeps in `Consumer::wait(None)` after polling for `spin`.
fn wakeup_netchannel(iters: u64, mode: WakeMode, spin: Duration, asleep: bool) -> Duration {
    wakeup_run(iters, asleep, |mut reply, state| {
        let (mut tx, mut rx) =
            Channel::builder(CAPACITY).wake(mode).spin(spin).build().expect("build a net channel");
        let zeros = [0u32; CAPACITY];
        let mut out = [0u32; CAPACITY];
        assert_eq!(tx.push_burst(&zeros), CAPACITY);
        assert_eq!(rx.pop_burst(&mut out), CAPACITY);
        let worker = spawn_worker(move || {
            state.send(ThreadState::of_current_thread()).expect("send thread state");
            while !rx.wait(None).is_closed() {
                while let Some(item) = rx.pop() {
                    reply.push(item).expect("reply channel has room");
                }
            }
        });
        (worker, move |item| tx.push(item).expect("request channel has room"))
    })
}

/// Anchor: a bare futex wakeup via `std::thread::park` / `Thread::unpark`, with a one-word mailbox;
/// the worker polls the mailbox for `spin` before it parks (`Duration::ZERO`: parks at once).
fn wakeup_thread_park(iters: u64, spin: Duration, asleep: bool) -> Duration {
    wakeup_run(iters, asleep, |mut reply, state| {
        const CLOSED: u32 = u32::MAX;
        let mailbox = Arc::new(CachePadded::new(AtomicU32::new(0)));
        let worker = {
            let mailbox = Arc::clone(&mailbox);
            spawn_worker(move || {
                state.send(ThreadState::of_current_thread()).expect("send thread state");
                let mut idle_since: Option<Instant> = None;
                loop {
                    // Acquire: pairs with the Release swap in `poke` and in the closer below.
                    match mailbox.swap(0, Ordering::Acquire) {
                        0 => {
                            let since = *idle_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= spin {
                                thread::park();
                                idle_since = None;
                            } else {
                                spin_loop();
                            }
                        }
                        CLOSED => return,
                        item => {
                            idle_since = None;
                            reply.push(item).expect("reply channel has room");
                        }
                    }
                }
            })
        };
        let sleeper = worker.thread().clone();
        let mut poke = Poke {
            send: move |item| {
                // Release: pairs with the worker's Acquire swap.
                mailbox.store(item, Ordering::Release);
                sleeper.unpark();
            },
            close: CLOSED,
        };
        (worker, move |item| (poke.send)(item))
    })
}

/// Sends `close` through `send` when dropped (how the park/unpark anchor tells its worker to exit).
struct Poke<F: FnMut(u32)> {
    send: F,
    close: u32,
}

impl<F: FnMut(u32)> Drop for Poke<F> {
    fn drop(&mut self) {
        (self.send)(self.close);
    }
}

/// Anchor: `std::sync::mpsc::sync_channel`, the worker blocked in `recv`.
fn wakeup_std_sync(iters: u64, asleep: bool) -> Duration {
    wakeup_run(iters, asleep, |mut reply, state| {
        let (tx, rx) = mpsc::sync_channel::<u32>(CAPACITY);
        let worker = spawn_worker(move || {
            state.send(ThreadState::of_current_thread()).expect("send thread state");
            while let Ok(item) = rx.recv() {
                reply.push(item).expect("reply channel has room");
            }
        });
        (worker, move |item| tx.send(item).expect("worker alive"))
    })
}

// ---------------------------------------------------------------------------------------------------
// The benchmark list, and the two ways to run it
// ---------------------------------------------------------------------------------------------------

/// One benchmark: Criterion's group and function name, the items moved per iteration for throughput
/// cases, and the routine that runs `iters` iterations and returns the time they took.
struct Case {
    group: &'static str,
    name: &'static str,
    burst: Option<usize>,
    run: Box<dyn Fn(u64) -> Duration>,
}

impl Case {
    fn new(group: &'static str, name: &'static str, run: impl Fn(u64) -> Duration + 'static) -> Self {
        Self { group, name, burst: None, run: Box::new(run) }
    }

    fn throughput(name: &'static str, burst: usize, run: impl Fn(u64) -> Duration + 'static) -> Self {
        Self::regime(Regime::Free, name, burst, run)
    }

    fn regime(
        regime: Regime,
        name: &'static str,
        burst: usize,
        run: impl Fn(u64) -> Duration + 'static,
    ) -> Self {
        Self { group: regime.group(), name, burst: Some(burst), run: Box::new(run) }
    }

    /// Criterion's id: `group/name[/burst]`.
    fn id(&self) -> String {
        match self.burst {
            Some(burst) => format!("{}/{}/{burst}", self.group, self.name),
            None => format!("{}/{}", self.group, self.name),
        }
    }

    /// Whether this is one of ours (the rest are anchors).
    fn is_ours(&self) -> bool {
        self.name.starts_with("netchannel")
    }
}

const GROUPS: [&str; 6] = [
    "throughput",
    "throughput_slow_producer",
    "throughput_slow_consumer",
    "ping_pong",
    "wakeup",
    "wakeup_back_to_back",
];

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for burst in BURSTS {
        // The net channel: its one-item API at burst 1, its burst API above.
        if burst == 1 {
            cases.push(Case::throughput("netchannel-park", burst, move |iters| {
                throughput_run(iters, burst, nc_single(WakeMode::Park))
            }));
            cases.push(Case::throughput("netchannel-poll", burst, move |iters| {
                throughput_run(iters, burst, nc_single(WakeMode::Poll))
            }));
        } else {
            cases.push(Case::throughput("netchannel-park", burst, move |iters| {
                throughput_run(iters, burst, nc_burst(WakeMode::Park))
            }));
            cases.push(Case::throughput("netchannel-poll", burst, move |iters| {
                throughput_run(iters, burst, nc_burst(WakeMode::Poll))
            }));
            cases.push(Case::throughput("rtrb-chunk", burst, move |iters| {
                throughput_run(iters, burst, rtrb_chunk())
            }));
        }
        cases.push(Case::throughput("rtrb-single", burst, move |iters| {
            throughput_run(iters, burst, rtrb_single())
        }));
        cases
            .push(Case::throughput("nexus-queue", burst, move |iters| throughput_run(iters, burst, nexus())));
        cases.push(Case::throughput("arrayqueue", burst, move |iters| {
            throughput_run(iters, burst, crossbeam())
        }));
        cases.push(Case::throughput("std-sync-channel", burst, move |iters| {
            throughput_run(iters, burst, std_sync())
        }));
    }
    for regime in [Regime::SlowProducer, Regime::SlowConsumer] {
        for burst in REGIME_BURSTS {
            cases.push(Case::regime(regime, "netchannel-park", burst, move |iters| {
                if burst == 1 {
                    throughput_regime_run(iters, burst, regime, nc_single(WakeMode::Park))
                } else {
                    throughput_regime_run(iters, burst, regime, nc_burst(WakeMode::Park))
                }
            }));
            cases.push(Case::regime(regime, "rtrb", burst, move |iters| {
                if burst == 1 {
                    throughput_regime_run(iters, burst, regime, rtrb_single())
                } else {
                    throughput_regime_run(iters, burst, regime, rtrb_chunk())
                }
            }));
            cases.push(Case::regime(regime, "nexus-queue", burst, move |iters| {
                throughput_regime_run(iters, burst, regime, nexus())
            }));
        }
    }
    cases.push(Case::new("ping_pong", "netchannel-park", |iters| {
        ping_pong_run(iters, nc_single(WakeMode::Park), nc_single(WakeMode::Park))
    }));
    cases.push(Case::new("ping_pong", "netchannel-poll", |iters| {
        ping_pong_run(iters, nc_single(WakeMode::Poll), nc_single(WakeMode::Poll))
    }));
    cases.push(Case::new("ping_pong", "rtrb", |iters| ping_pong_run(iters, rtrb_single(), rtrb_single())));
    cases.push(Case::new("ping_pong", "nexus-queue", |iters| ping_pong_run(iters, nexus(), nexus())));
    cases.push(Case::new("ping_pong", "bare-atomic", bare_atomic_run));
    for (group, asleep) in [("wakeup", true), ("wakeup_back_to_back", false)] {
        cases.push(Case::new(group, "netchannel-park-spin20us", move |iters| {
            wakeup_netchannel(iters, WakeMode::Park, SPIN, asleep)
        }));
        cases.push(Case::new(group, "netchannel-eventfd-spin20us", move |iters| {
            wakeup_netchannel(iters, WakeMode::EventFd, SPIN, asleep)
        }));
        cases.push(Case::new(group, "netchannel-park-nospin", move |iters| {
            wakeup_netchannel(iters, WakeMode::Park, Duration::ZERO, asleep)
        }));
        cases.push(Case::new(group, "thread-park", move |iters| {
            wakeup_thread_park(iters, Duration::ZERO, asleep)
        }));
        cases.push(Case::new(group, "thread-park-spin20us", move |iters| {
            wakeup_thread_park(iters, SPIN, asleep)
        }));
        cases.push(Case::new(group, "std-sync-channel", move |iters| wakeup_std_sync(iters, asleep)));
    }
    cases
}

/// The Criterion run: one group per benchmark kind, short warm-up and measurement so the whole run stays
/// near a minute and a half on a 2-core machine.
fn run_criterion(cases: &[Case]) {
    let mut c = Criterion::default().configure_from_args();
    for group_name in GROUPS {
        let mut group = c.benchmark_group(group_name);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));
        group.sample_size(20);
        for case in cases.iter().filter(|case| case.group == group_name) {
            let routine = |b: &mut criterion::Bencher<'_>| b.iter_custom(|iters| (case.run)(iters));
            match case.burst {
                Some(burst) => {
                    group.throughput(Throughput::Elements(burst as u64));
                    group.bench_function(BenchmarkId::new(case.name, burst), routine);
                }
                None => {
                    group.bench_function(case.name, routine);
                }
            }
        }
        group.finish();
    }
    c.final_summary();
}

/// The time each case runs per round in the interleaved mode.
const SLICE: Duration = Duration::from_millis(50);

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}

/// The interleaved mode (`NETCHANNEL_BENCH_INTERLEAVE=<rounds>`): runs every case for about [`SLICE`]
/// per round, round-robin, and prints per-case medians and, for each of ours against each anchor of the
/// same group and burst, the median of the per-round ratios. Each ratio compares two measurements taken
/// a fraction of a second apart, so load from other processes and changes in where the hypervisor runs
/// the two vCPUs disturb both sides of a ratio alike.
fn run_interleaved(cases: &[Case], rounds: usize) {
    let per_iter = |case: &Case, iters: u64, d: Duration| {
        d.as_nanos() as f64 / (iters * case.burst.unwrap_or(1) as u64) as f64
    };
    let iters: Vec<u64> = cases
        .iter()
        .map(|case| {
            let mut iters = 1u64;
            loop {
                let d = (case.run)(iters);
                if d >= SLICE / 5 {
                    let scaled = u128::from(iters) * SLICE.as_nanos() / d.as_nanos().max(1);
                    return u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
                }
                iters *= 4;
            }
        })
        .collect();
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cases.len()];
    for round in 0..rounds {
        for (i, case) in cases.iter().enumerate() {
            ns[i].push(per_iter(case, iters[i], (case.run)(iters[i])));
        }
        eprintln!("round {}/{rounds} done", round + 1);
    }
    println!("| case | iterations per slice | median ns per item or round trip | min | max |");
    println!("|---|---:|---:|---:|---:|");
    for (i, case) in cases.iter().enumerate() {
        let (min, max) = ns[i].iter().fold((f64::MAX, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let med = median(&mut ns[i].clone());
        println!("| {} | {} | {med:.2} | {min:.2} | {max:.2} |", case.id(), iters[i]);
    }
    println!();
    println!("| ours | anchor | median of per-round anchor/ours | min | max |");
    println!("|---|---|---:|---:|---:|");
    for (o, ours) in cases.iter().enumerate().filter(|(_, case)| case.is_ours()) {
        for (a, anchor) in cases.iter().enumerate() {
            if anchor.is_ours() || anchor.group != ours.group || anchor.burst != ours.burst {
                continue;
            }
            let mut ratios: Vec<f64> = ns[a].iter().zip(&ns[o]).map(|(a, o)| a / o).collect();
            let (min, max) = ratios.iter().fold((f64::MAX, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let med = median(&mut ratios);
            println!("| {} | {} | {med:.2}x | {min:.2}x | {max:.2}x |", ours.id(), anchor.name);
        }
    }
}

fn main() {
    pin_to_cpu(MAIN_CPU);
    let mut cases = cases();
    match std::env::var("NETCHANNEL_BENCH_INTERLEAVE").ok().and_then(|v| v.parse().ok()) {
        Some(rounds) => {
            // Like Criterion's filter: keep the cases whose id contains any non-flag argument.
            let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
            if !filters.is_empty() {
                cases.retain(|case| filters.iter().any(|f| case.id().contains(f.as_str())));
            }
            run_interleaved(&cases, rounds);
        }
        None => run_criterion(&cases),
    }
    // Relaxed: read after every worker has been joined.
    let not_asleep = NOT_ASLEEP.load(Ordering::Relaxed);
    let total = ROUND_TRIPS.load(Ordering::Relaxed);
    if total > 0 {
        println!("wakeup: {not_asleep} of {total} round trips started before the worker was seen asleep");
    }
}
