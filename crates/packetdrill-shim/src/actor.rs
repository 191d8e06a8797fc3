//! The thread that owns the [`Host`], and the calls packetdrill's threads make to it.
//!
//! packetdrill calls the interface from two threads: its main thread (packets, time, non-blocking
//! calls) and a system-call thread that makes the blocking calls and must *sleep* in them
//! (packetdrill reads the thread's state from `/proc` to know it is blocked). The stack is owned
//! by one thread, as everywhere in this workspace, so every call is a message to that thread:
//!
//! * a **socket call** is a closure run on the host; when it cannot finish (a blocking `accept`,
//!   `read`, `write`, `connect`, `poll`), it is *parked* and its caller sleeps on its reply
//!   channel;
//! * a **clock or link call** (`usleep`, `gettimeofday`, `netdev_send`, `netdev_receive`) moves
//!   time or feeds the stack, and retries the parked calls after every step.
//!
//! Parked calls are retried before the call that unblocked them returns, so a blocking `read`
//! finishes at the virtual instant its data arrived. packetdrill then reads the clock on the
//! system-call thread to check when the call returned; until that thread has made its next call
//! (that reading), clock and link steps from the other thread wait (a *fence*), so the main
//! thread cannot move time past the return before it is read. The outcome of a script does not
//! depend on thread scheduling. A fence lasts at most [`FENCE`] of real time, in case the woken
//! thread never calls again.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use crate::fds::Errno;
use crate::host::Host;
use crate::profile::Profile;
use crate::socket::Outcome;

/// A socket call: `true` once it has finished (and replied). With `give_up`, it replies
/// `EDEADLK` instead of running (see [`STALL`]).
type Job = Box<dyn FnMut(&mut Host, bool) -> bool + Send>;
/// A clock or link call.
type Step = Box<dyn FnOnce(&mut Host, &mut Parked) + Send>;

/// The longest a fence holds the other thread's steps back, in real time.
pub const FENCE: Duration = Duration::from_millis(500);

/// How long calls may stay parked while nothing at all reaches the host, in real time, before
/// they fail with `EDEADLK`. On virtual time nothing waits for the clock: a host that hears
/// nothing for this long has a blocking call that cannot finish (packetdrill made it on the
/// thread that would have to unblock it: Linux would block for ever there too).
pub const STALL: Duration = Duration::from_secs(10);

enum Msg {
    Call(ThreadId, Job),
    Step(ThreadId, Step),
}

impl Msg {
    fn thread(&self) -> ThreadId {
        match self {
            Self::Call(t, _) | Self::Step(t, _) => *t,
        }
    }
}

/// The socket calls waiting for the stack to move, and the threads whose parked call finished
/// and that have not called again since (the fence).
#[derive(Default)]
pub struct Parked {
    jobs: Vec<(ThreadId, Job)>,
    woken: Vec<ThreadId>,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parked({} calls, {} woken)", self.jobs.len(), self.woken.len())
    }
}

impl Parked {
    /// Runs every parked call again, as long as one of them finishes (one finishing can unblock
    /// another), flushing what each sends.
    pub fn retry(&mut self, host: &mut Host) {
        loop {
            let before = self.jobs.len();
            let jobs = std::mem::take(&mut self.jobs);
            for (thread, mut job) in jobs {
                if job(host, false) {
                    host.flush();
                    self.woken.push(thread);
                } else {
                    self.jobs.push((thread, job));
                }
            }
            if self.jobs.len() == before {
                break;
            }
        }
    }

    /// Fails every parked call with `EDEADLK` ([`STALL`]).
    fn give_up(&mut self, host: &mut Host) {
        for (_, mut job) in std::mem::take(&mut self.jobs) {
            job(host, true);
        }
    }

    /// How many calls wait.
    #[must_use]
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether none waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// The handle packetdrill's threads hold: a sender to the host's thread.
#[derive(Debug)]
pub struct Actor {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Call(..) => "Call",
            Self::Step(..) => "Step",
        })
    }
}

/// The host thread is gone (it panicked): every later call fails with `EIO`.
const GONE: Errno = Errno(libc::EIO);

impl Actor {
    /// Starts the host's thread with a stack configured by `profile`.
    ///
    /// # Errors
    /// Why the host could not be built (its buffer pool), or the thread not started.
    pub fn spawn(profile: Profile) -> Result<Self, String> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        let thread = std::thread::Builder::new()
            .name("packetdrill-shim".into())
            .spawn(move || match Host::new(profile) {
                Ok(host) => {
                    let _ = ready_tx.send(Ok(()));
                    serve(host, &rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("the stack's buffer pool: {e}")));
                }
            })
            .map_err(|e| format!("cannot start the host thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self { tx: Some(tx), thread: Some(thread) }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the host thread stopped while starting".into()),
        }
    }

    fn send(&self, msg: Msg) -> Result<(), Errno> {
        self.tx.as_ref().ok_or(GONE)?.send(msg).map_err(|_| GONE)
    }

    /// Runs a socket call on the host, parking it while it is [`Outcome::Blocked`]; returns its
    /// result once it finished. The calling thread sleeps meanwhile.
    ///
    /// # Errors
    /// The call's errno, or `EIO` when the host thread is gone.
    pub fn call<T: Send + 'static>(
        &self,
        mut f: impl FnMut(&mut Host) -> Outcome<T> + Send + 'static,
    ) -> Result<T, Errno> {
        let (reply, wait) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |host, give_up| {
            if give_up {
                let _ = reply.send(Err(Errno(libc::EDEADLK)));
                return true;
            }
            match f(host) {
                Outcome::Done(r) => {
                    let _ = reply.send(r);
                    true
                }
                Outcome::Blocked => false,
            }
        });
        self.send(Msg::Call(std::thread::current().id(), job))?;
        wait.recv().map_err(|_| GONE)?
    }

    /// Runs a clock or link step on the host and returns its value.
    ///
    /// # Errors
    /// `EIO` when the host thread is gone.
    pub fn step<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Host, &mut Parked) -> T + Send + 'static,
    ) -> Result<T, Errno> {
        let (reply, wait) = mpsc::sync_channel(1);
        self.send(Msg::Step(
            std::thread::current().id(),
            Box::new(move |host, parked| {
                let _ = reply.send(f(host, parked));
            }),
        ))?;
        wait.recv().map_err(|_| GONE)
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(mut host: Host, rx: &Receiver<Msg>) {
    let mut parked = Parked::default();
    let mut deferred: VecDeque<Msg> = VecDeque::new();
    loop {
        let msg = if !parked.woken.is_empty() {
            match rx.recv_timeout(FENCE) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    parked.woken.clear();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else if let Some(msg) = deferred.pop_front() {
            msg
        } else if !parked.is_empty() {
            match rx.recv_timeout(STALL) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    eprintln!(
                        "packetdrill-shim: {} blocking call(s) waited {} s of real time with nothing else \
                         happening; they cannot finish (failing them with EDEADLK)",
                        parked.len(),
                        STALL.as_secs()
                    );
                    parked.give_up(&mut host);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(msg) => msg,
                Err(_) => break,
            }
        };
        let from = msg.thread();
        if let Some(i) = parked.woken.iter().position(|&t| t == from) {
            parked.woken.swap_remove(i);
        } else if !parked.woken.is_empty() && matches!(msg, Msg::Step(..)) {
            // Time must not move until the woken thread has read the clock.
            deferred.push_back(msg);
            continue;
        }
        match msg {
            Msg::Call(thread, mut job) => {
                let done = job(&mut host, false);
                host.flush();
                if !done {
                    parked.jobs.push((thread, job));
                }
            }
            Msg::Step(_, step) => step(&mut host, &mut parked),
        }
        parked.retry(&mut host);
    }
}
