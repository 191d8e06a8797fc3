//! The model client's protocol ([`crate::client`] drives it): each connection sends messages of
//! random size in [`Options::size`], one at a time, and checks the echo byte for byte; the latency
//! of a message is from its first `send` to the last byte of its echo.

use tcp_lib::stack::{Error as StackError, Stack};

use super::Options;
use crate::client::{self, Advanced, Conn, Protocol, Summary, client_report};
use crate::util::mib;

client_report! {
    /// What the client did.
    pub struct ClientReport {
        /// Messages echoed intact.
        messages,
        /// Bytes sent (and received back, checked).
        bytes,
        /// Message latencies: 50th, 90th, 99th percentile and maximum.
        latency,
    }
}

/// Echo's side of a connection: the message in flight, how much of it is sent and echoed.
#[derive(Default)]
pub(super) struct Message {
    msg: Vec<u8>,
    sent: usize,
    echoed: usize,
}

/// Echo's client protocol: messages of random size in `size`, checked byte for byte.
pub(super) struct EchoProtocol {
    /// The message sizes, inclusive.
    pub(super) size: (usize, usize),
}

impl EchoProtocol {
    pub(super) fn new(options: &Options) -> Self {
        Self { size: options.size }
    }
}

impl Protocol for EchoProtocol {
    type State = Message;
    const EXCHANGE: &'static str = "message";
    const REPLY: &'static str = "echo";

    /// A new message of random size and contents.
    fn begin(&mut self, _stack: &mut Stack, c: &mut Conn<Message>) -> Result<(), String> {
        let (min, max) = self.size;
        let len = c.rng.usize(min..=max.max(min));
        let m = &mut c.state;
        m.msg.clear();
        m.msg.resize(len, 0);
        c.rng.fill(&mut m.msg);
        m.sent = 0;
        m.echoed = 0;
        Ok(())
    }

    /// Sends what the send buffer takes of the message, checks what came back.
    fn advance(
        &mut self,
        stack: &mut Stack,
        c: &mut Conn<Message>,
        buf: &mut [u8],
    ) -> Result<Advanced, String> {
        let m = &mut c.state;
        let mut moved = false;
        if m.sent < m.msg.len() {
            match stack.send(c.id, &m.msg[m.sent..]) {
                Ok(n) => {
                    m.sent += n;
                    moved = true;
                }
                Err(StackError::WouldBlock) => {}
                Err(e) => return Err(format!("send failed ({e})")),
            }
        }
        moved |= client::receive(stack, c.id, buf, |got| {
            let n = got.len();
            let expected = m
                .msg
                .get(m.echoed..m.echoed + n)
                .ok_or_else(|| format!("{n} bytes came back beyond the {} sent", m.sent))?;
            if let Some(at) = expected.iter().zip(got).position(|(a, b)| a != b) {
                return Err(format!(
                    "byte {} of the message came back as {:#04x}, sent {:#04x}",
                    m.echoed + at,
                    got[at],
                    expected[at]
                ));
            }
            m.echoed += n;
            Ok(())
        })?;
        let completed = (m.echoed == m.msg.len()).then_some(m.msg.len() as u64);
        Ok(Advanced { moved, completed })
    }

    fn progress(&self, totals: &Summary, secs: f64) -> String {
        format!(
            "{} messages, {:.1} MiB echoed, {:.1} MiB/s",
            totals.exchanges,
            mib(totals.bytes),
            mib(totals.bytes) / secs
        )
    }

    fn tally(&self, exchanges: u64) -> String {
        format!("{exchanges} messages echoed")
    }
}
