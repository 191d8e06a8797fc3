//! Short connections allocate nothing in steady state: the stack keeps its poll batch, the
//! congestion controller is held inline, small out-of-order/SACK state is allocated only when
//! used, and a reclaimed connection's ring storage goes to the next connection. Counted with a
//! global allocator that counts calls made on the test's thread.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use common::Net;
use tcp_lib::stack::StreamId;
use tcp_lib::tcp::State;

struct Counting;

thread_local! {
    /// Allocations made by this thread (`const`: its access allocates nothing itself).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; the counter is a thread-local `Cell`
// with a `const` initialiser, so counting neither allocates nor races.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// One transaction as the benches run it: connect, a 64-byte request, a 64-byte response, the
/// server closes, the client reads the end of stream and closes.
fn transaction(net: &mut Net, listener: tcp_lib::stack::ListenerId, port: u16) {
    let client = net.a.connect(Net::b_addr(port)).unwrap();
    let mut server: Option<StreamId> = None;
    let request = [7u8; 64];
    let mut buf = [0u8; 128];
    let mut sent = false;
    let mut answered = false;
    let mut got = 0;
    let mut closed = false;
    let done = net.run_until(200, |n| {
        if !sent && n.a.state(client) == Ok(State::Established) {
            assert_eq!(n.a.send(client, &request), Ok(64));
            sent = true;
        }
        server = server.or_else(|| n.b.accept(listener));
        if let Some(s) = server
            && !answered
            && let Ok(64) = n.b.recv(s, &mut buf)
        {
            assert_eq!(n.b.send(s, &buf[..64]).unwrap(), 64);
            n.b.close(s).unwrap();
            answered = true;
        }
        while answered && !closed {
            match n.a.recv(client, &mut buf[got..]) {
                Ok(0) => {
                    assert_eq!(got, 64, "the whole response before the end of stream");
                    n.a.close(client).unwrap();
                    closed = true;
                }
                Ok(k) => got += k,
                Err(_) => break,
            }
        }
        closed
    });
    assert!(done, "transaction did not finish");
}

#[test]
fn short_connections_allocate_nothing_in_steady_state() {
    let mut net = Net::with(|_| {}, |c| c.tcp.msl = Duration::from_secs(30));
    let port = 80;
    let listener = net.b.listen(port).unwrap();
    // Warm up: the tables (connections, TIME-WAIT records, timers) reach the size they keep.
    for _ in 0..300 {
        transaction(&mut net, listener, port);
    }
    let before = allocations();
    let runs = 100;
    for _ in 0..runs {
        transaction(&mut net, listener, port);
    }
    let per_run = (allocations() - before) as f64 / f64::from(runs);
    println!("allocations per transaction (both stacks): {per_run:.2}");
    assert!(per_run < 0.5, "{per_run:.2} allocations per transaction in steady state");
}
