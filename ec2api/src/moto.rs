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

/// The Python `moto_server` runs as when public parameters are seeded: moto's server, with its
/// SSM backend also serving the parameters in `KARPENTER_MOTO_PUBLIC_PARAMETERS` (one
/// `name=value` a line). moto ships only some public parameters (Amazon Linux, ECS, regions)
/// and refuses PutParameter under `/aws/`, so the seed joins the hook moto loads its own public
/// parameters through, the first time a backend looks a name up.
const SEEDED_LAUNCHER: &str = r#"
import os, sys, time
from collections import defaultdict
from moto.ssm import models
from moto.server import main

seed = [line.split("=", 1) for line in os.environ.get("KARPENTER_MOTO_PUBLIC_PARAMETERS", "").splitlines() if "=" in line]
load_public = models.ParameterDict._check_loading_status

def load_public_and_seeded(self, key):
    load_public(self, key)
    if getattr(self, "karpenter_seeded", False):
        return
    self.karpenter_seeded = True
    for name, value in seed:
        defaultdict.__getitem__(self, name).append(models.Parameter(
            account_id=self.account_id, name=name, value=value, parameter_type="String",
            description=None, allowed_pattern=None, keyid=None,
            last_modified_date=time.time(), version=1, data_type="text"))

models.ParameterDict._check_loading_status = load_public_and_seeded
main(sys.argv[1:])
"#;

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
        let mut command = Command::new("moto_server");
        command.envs(envs);
        Self::spawn(command, "moto_server (pip install 'moto[server]')")
    }

    /// [`MotoServer::start`], with SSM also answering GetParameter for each `(name, value)` of
    /// `parameters`, including names under `/aws/service/` that moto does not ship (the EKS
    /// and Windows AMI parameters AMI aliases read). Runs moto's server through `python3` from
    /// PATH, which must import the same moto `moto_server` runs.
    ///
    /// Errors: those of [`MotoServer::start`]; a name or value holding `=` or a line break
    /// (`InvalidInput`, as the seed is passed one `name=value` a line).
    pub fn start_with_public_parameters<K, V>(
        envs: impl IntoIterator<Item = (K, V)>,
        parameters: &[(&str, &str)],
    ) -> io::Result<MotoServer>
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut seed = String::new();
        for (name, value) in parameters {
            let breaks = |s: &str| s.contains(['\n', '\r']);
            if name.contains('=') || breaks(name) || breaks(value) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("SSM parameter {name:?} cannot be seeded one `name=value` a line"),
                ));
            }
            seed.push_str(&format!("{name}={value}\n"));
        }
        let mut command = Command::new("python3");
        command
            .args(["-c", SEEDED_LAUNCHER])
            .envs(envs)
            .env("KARPENTER_MOTO_PUBLIC_PARAMETERS", seed);
        Self::spawn(command, "python3 with moto (pip install 'moto[server]')")
    }

    /// Run `command` (moto's server) with `-H 127.0.0.1 -p <free port>` and wait until it
    /// listens; `what` names it in errors.
    fn spawn(mut command: Command, what: &str) -> io::Result<MotoServer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting {what}: {e}")))?;
        let server = MotoServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > START_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} not listening on port {port} after {START_TIMEOUT:?}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_that_cannot_be_passed_a_line_each_is_refused_before_starting() {
        for bad in [
            ("/a=b", "ami-1"),
            ("/a\nb", "ami-1"),
            ("/a", "ami-1\n/b=ami-2"),
        ] {
            let err = MotoServer::start_with_public_parameters(
                std::iter::empty::<(&str, &str)>(),
                &[bad],
            )
            .err()
            .expect("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
