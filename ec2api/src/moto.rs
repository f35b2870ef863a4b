//! A local EC2 API for tests and demos: `moto_server` (PyPI `moto[server]`) started on a free
//! loopback port and killed when dropped.

use std::ffi::OsStr;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `moto_server` gets to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `moto_server` child process; dropping it kills the process.
pub struct MotoServer {
    child: Child,
    /// `http://127.0.0.1:<port>`: the endpoint URL to give the AWS SDK.
    pub url: String,
}

impl MotoServer {
    /// Start `moto_server` from PATH on 127.0.0.1 with extra environment variables (e.g.
    /// `MOTO_AMIS_PATH` for the images it serves) and wait until it accepts connections.
    ///
    /// Errors: no free port, `moto_server` missing from PATH, or not listening within
    /// [`START_TIMEOUT`].
    pub fn start<K, V>(envs: impl IntoIterator<Item = (K, V)>) -> io::Result<MotoServer>
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(envs)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting moto_server (pip install 'moto[server]'): {e}"),
                )
            })?;
        let server = MotoServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > START_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("moto_server not listening on port {port} after {START_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
