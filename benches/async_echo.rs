//! The async echo against the blocking echo (issue 19's "within 10% in CPU per transaction, same
//! run"): `cargo bench -p netchannels-benches --features async --bench async_echo` (`-- --rounds N --cores C`).
//!
//! Both services ([`netchannels::echo::run`] and [`netchannels::echo::run_async`]) serve the
//! 82599 model's in-process client on the same runtime settings, in interleaved rounds (blocking
//! then async in even rounds, async then blocking in odd ones, so drift in the machine's load
//! falls on both), for two workloads:
//!
//! * **messages**: 16 connections, 2000 messages of 64 bytes each, one at a time per connection
//!   (one transaction: a message in, its echo out);
//! * **connections**: 300 connections, each one 64-byte message and its echo, then the close
//!   (one transaction: a whole connection). The model's client opens them all at once; many more
//!   (2000) overflow the model's rings, and the retransmissions 200 ms later make the run's CPU
//!   bimodal.
//!
//! The figure is the server's CPU per transaction: the summed CPU time of the cores' threads
//! while they served (`/proc/thread-self/schedstat`, [`netchannels::echo::Report::server_cpu`]),
//! over the client's completed messages. It includes what an idle core spends before it sleeps
//! (both services wait the same way, through the runtime's device). Printed per round, then the
//! medians and the async/blocking ratio, with the load average.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use netchannels::cli::ServeArgs;
use netchannels::echo::{Options, Report, run, run_async};

type Run = fn(&Options, &AtomicBool) -> Result<Report, String>;

struct Workload {
    name: &'static str,
    conns: usize,
    messages: u64,
}

const WORKLOADS: [Workload; 2] = [
    Workload { name: "messages (16 conns x 2000 x 64 B)", conns: 16, messages: 2000 },
    Workload { name: "connections (300 x 1 x 64 B)", conns: 300, messages: 1 },
];

/// One run: (server CPU per transaction, transactions per second).
fn once(run: Run, cores: usize, w: &Workload) -> (Duration, f64) {
    let options = Options {
        serve: ServeArgs { cores: Some(cores), ..ServeArgs::default() },
        conns: w.conns,
        messages: w.messages,
        size: (64, 64),
        progress: false,
        ..Options::default()
    };
    let report = run(&options, &AtomicBool::new(false)).unwrap_or_else(|e| panic!("{}: {e}", w.name));
    let client = report.client.as_ref().expect("the model's client ran");
    assert_eq!(client.completed, w.conns, "{report}");
    assert_eq!(report.failed(), 0, "{report}");
    let cpu = report.server_cpu().expect("the cores' CPU times (Linux)");
    let transactions = client.messages.max(1);
    (
        cpu / u32::try_from(transactions).expect("fewer than 2^32"),
        transactions as f64 / client.elapsed.as_secs_f64(),
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let rounds = if smoke { 1 } else { arg("--rounds", 5) };
    let cores = arg("--cores", 2);
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("async echo against the blocking echo: {rounds} rounds, {cores} cores; load {}", load().trim());
    for w in &WORKLOADS {
        let (mut blocking, mut asynchronous) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let order: [(&str, Run); 2] = if round % 2 == 0 {
                [("blocking", run), ("async", run_async)]
            } else {
                [("async", run_async), ("blocking", run)]
            };
            for (mode, run) in order {
                let (cpu, rate) = once(run, cores, w);
                println!(
                    "  {}: round {round}, {mode}: {:.2} us CPU per transaction, {rate:.0} transactions/s",
                    w.name,
                    cpu.as_secs_f64() * 1e6
                );
                if mode == "async" { asynchronous.push(cpu) } else { blocking.push(cpu) }
            }
        }
        let (b, a) = (median(blocking), median(asynchronous));
        println!(
            "{}: median CPU per transaction: blocking {:.2} us, async {:.2} us, async/blocking {:.3}",
            w.name,
            b.as_secs_f64() * 1e6,
            a.as_secs_f64() * 1e6,
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
    println!("load after: {}", load().trim());
}
