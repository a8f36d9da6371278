//! The real peers the tests talk to, found or the test fails: `node` and the npm packages pinned
//! in `scripts/install-tools`, the pinned Python venv, PostgreSQL, anvil, Chromium and nginx.
//!
//! No test passes by skipping: a test whose peer is missing panics with the command that installs
//! it (`scripts/install-tools`, `scripts/install-chromium`, `scripts/install-nginx`) or the
//! variable to set (`TOLLGATE_TEST_DATABASE_URL`). `scripts/test` installs and sets them all.
//!
//! ```no_run
//! use tollgate_testkit::peer;
//! let scripts = peer::interop_scripts(&["x402-fetch"]); // node + the pinned packages
//! let out = std::process::Command::new(peer::node())
//!     .arg(scripts.join("x402-fetch-pay.mjs"))
//!     .output();
//! let url = peer::database_url(); // TOLLGATE_TEST_DATABASE_URL
//! ```
//!
//! [`run_alone`] runs one test of the current test binary in a child process with a peer taken
//! away, for the tests that show a missing peer fails.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use crate::repo_root;

/// The command that installs the pinned tools: anvil, solc, the npm packages and the Python venv.
pub const INSTALL_TOOLS: &str = "scripts/install-tools";
/// The command that installs Debian's Chromium (`/usr/bin/chromium`).
pub const INSTALL_CHROMIUM: &str = "scripts/install-chromium";
/// The command that installs Debian's nginx (`/usr/sbin/nginx`).
pub const INSTALL_NGINX: &str = "scripts/install-nginx";
/// The variable that names the PostgreSQL database the tests use (a schema of their own each).
pub const DATABASE_URL_VAR: &str = "TOLLGATE_TEST_DATABASE_URL";
/// What to do when [`DATABASE_URL_VAR`] is not set.
pub const SET_DATABASE_URL: &str =
    "set TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test (scripts/test sets it)";
/// Overrides where the pinned tools are (default `<repo>/.tools`): the tests that show a missing
/// tool fails point it at an empty directory.
pub const TOOLS_DIR_VAR: &str = "TOLLGATE_TOOLS_DIR";

/// Where `scripts/install-tools` puts the pinned tools: `$TOLLGATE_TOOLS_DIR`, else
/// `<repo>/.tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os(TOOLS_DIR_VAR)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools"))
}

/// `node` (Node.js 20) on `PATH`, as an absolute path; panics with the install command when it is
/// missing or does not run.
pub fn node() -> PathBuf {
    static NODE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    NODE.get_or_init(|| find_node(std::env::var_os("PATH").as_deref()))
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn find_node(path: Option<&OsStr>) -> Result<PathBuf, String> {
    let missing = |why: String| {
        format!(
            "this test needs `node` (Node.js 20) and {why}: install Node.js 20 (e.g. `apt-get \
             install nodejs npm`), then run {INSTALL_TOOLS}"
        )
    };
    let found = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("node"))
        .find(|bin| bin.is_file())
        .ok_or_else(|| missing("it is not on PATH".to_owned()))?;
    match Command::new(&found).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(found),
        Ok(out) => Err(missing(format!(
            "`{} --version` failed ({}): {}",
            found.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(e) => Err(missing(format!("`{}` does not run: {e}", found.display()))),
    }
}

/// The pinned npm packages' `node_modules` (under [`tools_dir`]), after checking that each of
/// `packages` is installed; panics with the install command when one is missing.
pub fn npm_packages(packages: &[&str]) -> PathBuf {
    let modules = tools_dir().join("node_modules");
    for package in packages {
        let manifest = modules.join(package).join("package.json");
        assert!(
            manifest.is_file(),
            "this test needs the pinned npm package `{package}`, and {} is missing: run \
             {INSTALL_TOOLS}",
            manifest.display()
        );
    }
    modules
}

/// The `tests/interop` scripts directory, after checking for [`node`] and the pinned npm
/// `packages` the scripts load ([`npm_packages`]); panics with the install command when one is
/// missing.
pub fn interop_scripts(packages: &[&str]) -> PathBuf {
    node();
    npm_packages(packages);
    repo_root().join("tests/interop")
}

/// The pinned Python (the venv `scripts/install-tools` makes under [`tools_dir`]`/py`, with the
/// PyPI `x402` package); panics with the install command when it is missing.
pub fn python_venv() -> PathBuf {
    let python = tools_dir().join("py/bin/python");
    assert!(
        python.is_file(),
        "this test needs the pinned Python venv, and {} is missing: run {INSTALL_TOOLS}",
        python.display()
    );
    python
}

/// The PostgreSQL database of `TOLLGATE_TEST_DATABASE_URL`; panics saying to set it when it is
/// unset or empty.
pub fn database_url() -> String {
    database_url_from(std::env::var(DATABASE_URL_VAR).ok())
}

fn database_url_from(value: Option<String>) -> String {
    value.filter(|url| !url.is_empty()).unwrap_or_else(|| {
        panic!("this test needs PostgreSQL, and {DATABASE_URL_VAR} is not set: {SET_DATABASE_URL}")
    })
}

/// The anvil binary ([`crate::anvil_binary`]: `$ANVIL_BIN`, else the pinned one under
/// [`tools_dir`]); panics with the install command when it is missing.
pub fn anvil() -> PathBuf {
    crate::anvil_binary()
        .unwrap_or_else(|e| panic!("this test needs anvil: {e} (run {INSTALL_TOOLS})"))
}

/// Debian's Chromium (`/usr/bin/chromium`); panics with the install command when it is missing.
pub fn chromium() -> PathBuf {
    installed("/usr/bin/chromium", "Debian's Chromium", INSTALL_CHROMIUM)
}

/// Debian's nginx (`/usr/sbin/nginx`); panics with the install command when it is missing.
pub fn nginx() -> PathBuf {
    installed("/usr/sbin/nginx", "Debian's nginx", INSTALL_NGINX)
}

fn installed(path: &str, what: &str, install: &str) -> PathBuf {
    let path = Path::new(path);
    assert!(
        path.is_file(),
        "this test needs {what}, and {} is missing: run {install}",
        path.display()
    );
    path.to_owned()
}

/// What a test run alone printed, and whether it passed.
#[derive(Debug)]
pub struct Alone {
    /// Whether the child test binary exited with success.
    pub passed: bool,
    /// Its stdout, then its stderr.
    pub output: String,
}

/// Runs the test `name` (its full path, e.g. `interop::x402_fetch_pays_tollgate_dev_quote`) of
/// the current test binary alone, in a child process, with `env` changed (`None` removes a
/// variable): e.g. `PATH` without `node`, or `TOLLGATE_TEST_DATABASE_URL` unset. Panics when the
/// binary ran no test by that name (its summary must say that one test passed or failed).
pub fn run_alone(name: &str, env: &[(&str, Option<&str>)]) -> Alone {
    let exe = std::env::current_exe().expect("the current test binary");
    let mut cmd = Command::new(&exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads", "1"]);
    for (key, value) in env {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {} --exact {name}: {e}", exe.display()));
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        output.contains("test result: ok. 1 passed") || output.contains("0 passed; 1 failed"),
        "{} ran no test named {name}:\n{output}",
        exe.display()
    );
    Alone {
        passed: out.status.success(),
        output,
    }
}

/// Asserts that the test `name` of the current test binary, run alone with `env` changed
/// ([`run_alone`]), fails and says `hint` (the install command, or the variable to set).
pub fn assert_fails_without_peer(name: &str, env: &[(&str, Option<&str>)], hint: &str) {
    let alone = run_alone(name, env);
    assert!(
        !alone.passed,
        "{name} passed without its peer (env {env:?}): it must fail and say `{hint}`\n{}",
        alone.output
    );
    assert!(
        alone.output.contains(hint),
        "{name} failed without its peer (env {env:?}) but did not say `{hint}`:\n{}",
        alone.output
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_not_found_on_a_path_without_it() {
        let e = find_node(Some(OsStr::new("/nonexistent"))).unwrap_err();
        assert!(e.contains("not on PATH"), "{e}");
        assert!(e.contains(INSTALL_TOOLS), "{e}");
        assert!(find_node(None).unwrap_err().contains(INSTALL_TOOLS));
    }

    #[test]
    #[should_panic(
        expected = "set TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test (scripts/test sets it)"
    )]
    fn an_unset_database_url_fails_saying_what_to_set() {
        database_url_from(None);
    }

    #[test]
    #[should_panic(expected = "TOLLGATE_TEST_DATABASE_URL is not set")]
    fn an_empty_database_url_is_unset() {
        database_url_from(Some(String::new()));
    }

    #[test]
    fn a_set_database_url_is_returned() {
        assert_eq!(
            database_url_from(Some("postgres://x".into())),
            "postgres://x"
        );
    }

    #[test]
    #[should_panic(expected = "run scripts/install-chromium")]
    fn a_missing_program_fails_with_its_install_command() {
        installed(
            "/nonexistent/chromium",
            "Debian's Chromium",
            INSTALL_CHROMIUM,
        );
    }
}
