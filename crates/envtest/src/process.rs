//! Child processes that can never outlive the test binary.
//!
//! Rust tests have no global teardown and statics are never dropped, so a
//! plain `Child` kept in a static would be left running when the binary
//! exits. Each process here runs under a small `sh` guard whose stdin is a
//! pipe held by this process: when the pipe closes (the guard is dropped,
//! or the test binary exits or is killed, even by SIGKILL) the guard reads
//! EOF, stops the child (SIGTERM, SIGKILL after 5 s) and removes its
//! scratch folder. The pipe is close-on-exec, so no other child keeps it
//! open.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// The guard: starts "$@" in the background, prints its pid, waits for EOF
/// on stdin, then stops it and cleans up.
const GUARD: &str = r#"
"$@" >>"$GUARD_LOG" 2>&1 </dev/null &
child=$!
echo "$child"
while read -r _; do :; done
# A child that exited is a zombie until reaped: read its state, not kill -0.
alive() { [ -r "/proc/$child/stat" ] && [ "$(sed 's/.*) //' "/proc/$child/stat" | cut -d' ' -f1)" != Z ]; }
kill -TERM "$child" 2>/dev/null
i=0
while alive && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
kill -KILL "$child" 2>/dev/null
wait "$child" 2>/dev/null
if [ -n "$GUARD_CLEANUP" ]; then rm -rf "$GUARD_CLEANUP"; fi
"#;

/// A process under a guard. Dropping it stops the process and waits.
pub struct Guarded {
    name: String,
    pid: u32,
    log: PathBuf,
    stdin: Option<ChildStdin>,
    guard: Child,
}

impl Guarded {
    /// Starts `program` with `args` and exactly the environment `env`
    /// (nothing is inherited but PATH), logging to `log`. `cleanup` is
    /// removed once the process is gone.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
        cleanup: Option<&Path>,
    ) -> Result<Self, String> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(GUARD)
            .arg("guard")
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GUARD_LOG", log)
            .env(
                "GUARD_CLEANUP",
                cleanup.map(Path::as_os_str).unwrap_or_default(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut guard = cmd
            .spawn()
            .map_err(|e| format!("failed to start the guard of {name}: {e}"))?;
        let stdout = guard.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("failed to read the pid of {name}: {e}"))?;
        let pid = line
            .trim()
            .parse()
            .map_err(|_| format!("the guard of {name} printed {line:?}, not a pid"))?;
        Ok(Self {
            name: name.to_string(),
            pid,
            log: log.to_path_buf(),
            stdin: guard.stdin.take(),
            guard,
        })
    }

    /// The process id (not the guard's), for /proc.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether the process still runs. A child that exited stays a zombie
    /// of its guard until the guard reaps it, so the state letter counts.
    pub fn alive(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // "pid (comm) S ...": the state follows the last ')'.
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        }
    }

    /// Fails with the log's tail when the process has exited.
    pub fn check_alive(&self) -> Result<(), String> {
        if self.alive() {
            Ok(())
        } else {
            Err(format!(
                "{} exited; last lines of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(40)
            ))
        }
    }

    /// Sends a signal (e.g. "KILL", "TERM") to the process itself.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status();
    }

    /// Kills the process with SIGKILL and waits until it is gone (bounded).
    pub fn kill(&self) {
        self.signal("KILL");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process with SIGTERM, waits (bounded) for its guard.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        // The guard waits at most 5 s for the child, then kills it.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            match self.guard.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if std::time::Instant::now() >= deadline => {
                    let _ = self.guard.kill();
                    let _ = self.guard.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.shutdown();
    }
}
