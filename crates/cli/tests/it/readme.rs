//! Running the shell blocks of the README and the book (`docs/src/`) verbatim: the `sh` block
//! after a marker, one command at a time through `bash -c`, in a directory of the test's, with
//! only the environment a reader sets (the quick start, the walkthrough, the go-live chapter and
//! the devnet's example use it; `book.rs` checks that every shell block has such a test).

// The transcript (each command, its exit status and output) goes to stderr, which the test
// runner shows when a test fails (and with --no-capture).
#![allow(clippy::print_stderr)]

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::process::{Child, Command};

/// How long one command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// A file of the repository, by its path from the root (`README.md`, `docs/src/…`).
pub(crate) fn repo_file(path: &str) -> String {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `sh` block after `marker` in `page` (a path from the repository's root: `README.md`,
/// `docs/src/walkthrough.md`): one command per line, with heredocs and `\` continuations
/// joined, comment lines and blank lines left out.
pub(crate) fn commands(page: &str, marker: &str) -> Vec<String> {
    let text = repo_file(page);
    let (_, after) = text
        .split_once(marker)
        .unwrap_or_else(|| panic!("{page} marks the section with {marker}"));
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{page}: a ```sh block right after {marker}"));
    let block = &block[..block.find("\n```").expect("the block's end")];
    let mut commands = Vec::new();
    let mut lines = block.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut command = line.to_owned();
        if let Some((_, tag)) = line.split_once("<<") {
            let tag = tag.trim().trim_matches(['\'', '"']).to_owned();
            for next in lines.by_ref() {
                command.push('\n');
                command.push_str(next);
                if next.trim() == tag {
                    break;
                }
            }
        }
        while command.ends_with('\\') {
            command.pop();
            command.push_str(lines.next().expect("a continued line"));
        }
        commands.push(command);
    }
    commands
}

/// What a command did.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }

    #[track_caller]
    pub(crate) fn ok(self) -> Self {
        assert_eq!(self.code, 0, "failed: {}\n{}", self.stdout, self.stderr);
        self
    }
}

/// Walks a block's commands in order: each step names what it expects the next command to be,
/// so an edit of the README or the book that the test does not know fails there, by line.
pub(crate) struct Walk {
    commands: std::vec::IntoIter<String>,
    pub(crate) dir: PathBuf,
    pub(crate) env: BTreeMap<String, String>,
    background: Vec<(String, Child)>,
}

impl Walk {
    /// A walk over `commands`, run in `dir` with exactly the environment `env`.
    pub(crate) fn new(commands: Vec<String>, dir: PathBuf, env: BTreeMap<String, String>) -> Self {
        Self {
            commands: commands.into_iter(),
            dir,
            env,
            background: Vec::new(),
        }
    }

    pub(crate) fn next(&mut self, starts_with: &str) -> String {
        let command = self.commands.next().expect("more commands in the block");
        assert!(
            command.starts_with(starts_with),
            "the block's next command is {command:?}, expected {starts_with:?}…"
        );
        command
    }

    /// `NAME=…` or `export NAME=…`, a value the reader sets: takes `value`, as the reader would
    /// copy it.
    pub(crate) fn set(&mut self, name: &str, value: impl Into<String>) {
        let command = self.commands.next().expect("more commands in the block");
        assert!(
            command.starts_with(&format!("{name}="))
                || command.starts_with(&format!("export {name}=")),
            "the block's next command is {command:?}, expected {name}=… or export {name}=…"
        );
        let value = value.into();
        eprintln!("$ {command}\n  ({name}={value})");
        self.env.insert(name.to_owned(), value);
    }

    /// `export NAME=…` evaluated by bash, verbatim; its value.
    pub(crate) async fn export(&mut self, name: &str) -> String {
        let command = self.next(&format!("export {name}="));
        let out = self
            .bash(&format!("{command}\nprintf %s \"${name}\""))
            .await
            .ok();
        eprintln!("$ {command}");
        self.env.insert(name.to_owned(), out.stdout.clone());
        out.stdout
    }

    /// `NAME=…` evaluated by bash, verbatim, with the walk's environment; its value.
    pub(crate) async fn assign(&mut self, name: &str) -> String {
        let command = self.next(&format!("{name}="));
        let out = self
            .bash(&format!("{command}\nprintf %s \"${name}\""))
            .await
            .ok();
        eprintln!("$ {command}\n  ({name}={})", out.stdout);
        self.env.insert(name.to_owned(), out.stdout.clone());
        out.stdout
    }

    /// `. FILE` (a shell's `source`), verbatim: the variables it sets whose names start with
    /// `prefix` stay set for the later commands, as in the reader's shell.
    pub(crate) async fn source(&mut self, starts_with: &str, prefix: &str) {
        let command = self.next(starts_with);
        let out = self.bash(&format!("{command}\nenv -0")).await.ok();
        eprintln!("$ {command}");
        for (name, value) in out.stdout.split('\0').filter_map(|kv| kv.split_once('=')) {
            if name.starts_with(prefix) {
                eprintln!("  ({name}={value})");
                self.env.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    pub(crate) fn bash_command(&self, command: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", command])
            .current_dir(&self.dir)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    pub(crate) async fn bash(&self, command: &str) -> Output {
        let out = tokio::time::timeout(COMMAND_TIMEOUT, self.bash_command(command).output())
            .await
            .unwrap_or_else(|_| panic!("timed out: {command}"))
            .unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the next command, which must start with `starts_with`.
    pub(crate) async fn run(&mut self, starts_with: &str) -> Output {
        let command = self.next(starts_with);
        self.sh(&command).await
    }

    /// Runs the next command again until `done` holds (as a reader would, for what the chain or
    /// a cache settles within seconds), at most `within`; every earlier attempt must satisfy
    /// `meanwhile` (the state before).
    pub(crate) async fn run_until(
        &mut self,
        starts_with: &str,
        within: Duration,
        done: impl Fn(&Output) -> bool,
        meanwhile: impl Fn(&Output) -> bool,
    ) -> Output {
        let command = self.next(starts_with);
        self.sh_until(&command, within, done, meanwhile).await
    }

    /// Runs `command` (one of the test's, not the block's), with the transcript.
    pub(crate) async fn sh(&self, command: &str) -> Output {
        let out = self.bash(command).await;
        eprintln!(
            "$ {command}\n  exit {}\n  stdout: {}\n  stderr: {}",
            out.code,
            out.stdout.trim(),
            out.stderr.trim()
        );
        out
    }

    /// Runs `command` again until `done` holds, at most `within`; every earlier attempt must
    /// satisfy `meanwhile`. A failure shows the background processes' logs.
    pub(crate) async fn sh_until(
        &self,
        command: &str,
        within: Duration,
        done: impl Fn(&Output) -> bool,
        meanwhile: impl Fn(&Output) -> bool,
    ) -> Output {
        let started = Instant::now();
        for attempt in 1.. {
            let out = self.bash(command).await;
            if done(&out) {
                eprintln!(
                    "$ {command}\n  exit {} at attempt {attempt}, after {:?}\n  stdout: {}\n  stderr: {}",
                    out.code,
                    started.elapsed(),
                    out.stdout.trim(),
                    out.stderr.trim()
                );
                return out;
            }
            assert!(
                meanwhile(&out),
                "{command}: unexpected at attempt {attempt}: {out:?}\n{}",
                self.logs()
            );
            assert!(
                started.elapsed() < within,
                "{command}: not done in {within:?}: {out:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        unreachable!()
    }

    /// Starts the next command, which ends in `&`, as a background process of the test; its
    /// stderr goes to `<name>.log` in the directory.
    pub(crate) fn spawn(&mut self, starts_with: &str, name: &str) {
        let command = self.next(starts_with);
        let foreground = command
            .trim_end()
            .strip_suffix('&')
            .expect("a background command")
            .to_owned();
        eprintln!("$ {command}");
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = self
            .bash_command(&format!("exec {foreground}"))
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.background.push((name.to_owned(), child));
    }

    /// The tails of the background processes' logs, for failure messages.
    pub(crate) fn logs(&self) -> String {
        self.background
            .iter()
            .map(|(name, _)| {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name}.log (tail) ---\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every command of the block was walked.
    pub(crate) fn done(&mut self) {
        let rest: Vec<String> = self.commands.by_ref().collect();
        assert!(
            rest.is_empty(),
            "commands of the block this test does not know: {rest:?}"
        );
    }
}
