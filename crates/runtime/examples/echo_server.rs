//! A multi-core TCP echo, blocking style: each core accepts, echoes until EOF, accepts the next.
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use netchannel_runtime::{Backend, Builder, Core, Error, Report, Runtime};

const USAGE: &str = "echo_server --tap NAME | --xdp IFACE [--cores N] [--ip A/N] [--port P] [--seconds S]";

/// Serves the echo on `port` of every core until `stop` is set, `seconds` pass or a core fails.
pub fn serve(builder: Builder, port: u16, seconds: Option<f64>, stop: &AtomicBool) -> Result<Report, Error> {
    let service = |core: &mut Core<'_>| -> std::io::Result<()> {
        let listener = core.listen(port)?;
        loop {
            // `accept` fails with `Stopping` when the runtime stops; a copy's error ends one stream.
            let (stream, _) = listener.accept()?;
            let _ = std::io::copy(&mut &stream, &mut &stream);
        }
    };
    Ok(builder.build()?.run(service, |c| c.wait(seconds.map(Duration::from_secs_f64), stop, |_, _| {}))?.1)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut builder, mut backend, mut port, mut seconds) = (Runtime::builder(), None, 7, None);
    for pair in std::env::args().skip(1).collect::<Vec<_>>().chunks(2) {
        match (pair[0].as_str(), pair.get(1).ok_or(USAGE)?) {
            ("--tap", name) => backend = Some(Backend::tap(name)),
            ("--xdp", iface) => backend = Some(Backend::xdp(iface)),
            ("--cores", n) => builder = builder.cores(n.parse()?),
            ("--ip", cidr) => builder = builder.ip(cidr.parse()?),
            ("--port", p) => port = p.parse()?,
            ("--seconds", s) => seconds = Some(s.parse()?),
            _ => return Err(USAGE.into()),
        }
    }
    let builder = builder.backend(backend.ok_or(USAGE)?);
    let report = serve(builder, port, seconds, &AtomicBool::new(false)).map_err(|e| e.to_string())?;
    let s = &report.snapshot;
    println!("{report}{} accepted, {} frames in, {} dropped", s.accepted(), s.rx_frames(), s.dropped());
    Ok(())
}
