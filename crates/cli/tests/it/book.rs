//! The book (`docs/`, built by mdBook) and the README that points into it: the README stays a
//! short front page with the two commands; the book has a chapter per task; every shell block of
//! either is run verbatim by a test (the table [`RUNNERS`]); the book's links and anchors resolve
//! in the HTML mdBook builds; its page about the HTTP API's endpoints is what the facilitator's
//! `/openapi.json` says; and the quick start, its 30-second demo and the devnet's example run.

// The transcript of the blocks run (each command, its exit status and output) goes to stderr,
// which the test runner shows when a test fails.
#![allow(clippy::print_stderr)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use alloy::primitives::{Address, U256};
use serde_json::Value;
use tollgate_chain::contracts::{self, Token};

use crate::readme::{self, Walk, repo_file};

/// Every marker a shell block may follow, with the test that runs the block after it verbatim
/// (its name, and the file of `crates/cli/tests/it/` that defines it). A `sh`, `bash` or `shell`
/// block in the README or the book without one of these right before it fails
/// [`book_shell_blocks_each_follow_a_marker_naming_the_test_that_runs_them`]; a block that is not
/// meant to run verbatim (output, a config file, a synopsis with placeholders) is `text`, `toml`
/// or `console`.
const RUNNERS: &[(&str, &str, &str)] = &[
    (
        "<!-- quickstart -->",
        "readme_quick_start_runs_dev_and_the_demo_pays",
        "book.rs",
    ),
    (
        "<!-- demo -->",
        "readme_quick_start_runs_dev_and_the_demo_pays",
        "book.rs",
    ),
    (
        "<!-- walkthrough -->",
        "readme_walkthrough_sells_and_subscribes_with_the_cli_only",
        "walkthrough.rs",
    ),
    (
        "<!-- golive -->",
        "readme_go_live_on_base_sepolia_deploys_serves_and_is_paid_in_usdc",
        "golive.rs",
    ),
    (
        "<!-- devnet -->",
        "book_devnet_example_reads_the_token_over_json_rpc",
        "book.rs",
    ),
];

/// The README's longest allowed length, in lines: a front page, not the manual.
const README_MAX_LINES: usize = 120;

/// The generated page of the book about the HTTP API's endpoints.
const API_PAGE: &str = "docs/src/reference/api.md";

/// Set to `update` to write [`API_PAGE`] from the OpenAPI document.
const API_UPDATE_VAR: &str = "TOLLGATE_BOOK_API";

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The book's pages, as paths from the repository's root.
fn book_pages() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = root();
    let mut pages = Vec::new();
    walk(&root.join("docs/src"), &mut pages);
    let mut pages: Vec<String> = pages
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    pages.sort();
    pages
}

/// Each fenced block of `text`: its language (the info string's first word), the line it opens
/// on (1-based) and the nearest non-blank line before it.
fn fences(text: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    let mut before = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(fence) = &open {
            if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence {
                open = None;
                before = line.to_owned();
            }
            continue;
        }
        let ticks = trimmed.len() - trimmed.trim_start_matches('`').len();
        if ticks >= 3 {
            let info = trimmed[ticks..].trim();
            let lang = info
                .split([' ', ',', '{'])
                .next()
                .unwrap_or_default()
                .to_owned();
            out.push((lang, i + 1, before.trim().to_owned()));
            open = Some("`".repeat(ticks));
        } else if !trimmed.is_empty() {
            before = line.to_owned();
        }
    }
    out
}

/// The issue's complaint: a README of hundreds of lines with no guide by task. The README is a
/// front page (what Tollgate is, the two commands, a 30-second demo, a map of the book) and the
/// book has a chapter per task.
#[test]
fn readme_is_short_with_the_two_commands_and_the_book_has_the_task_chapters() {
    let readme = repo_file("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: the rest belongs in the book \
         (docs/src/)"
    );
    // The two commands, exactly as .ci/run and the quick start know them.
    assert_eq!(
        readme::commands("README.md", "<!-- quickstart -->"),
        [
            "cargo run --release -p tollgate-cli -- dev   # the main job: devnet + facilitator + a demo gated API",
            "scripts/test                                 # every check and test CI runs",
        ]
    );
    assert!(readme.contains("<!-- demo -->"), "the 30-second demo");

    // The map: every page of the book the README links to exists, and it links to each part.
    let summary = repo_file("docs/src/SUMMARY.md");
    for part in [
        "# Concepts",
        "# Sell an API",
        "# Pay for one",
        "# Run a facilitator",
        "# Reference",
    ] {
        assert!(
            summary.lines().any(|l| l == part),
            "SUMMARY.md has the part {part:?}"
        );
    }
    let part = |name: &str| -> String {
        summary
            .split_once(&format!("# {name}\n"))
            .unwrap_or_else(|| panic!("the part {name}"))
            .1
            .split("\n# ")
            .next()
            .unwrap()
            .to_owned()
    };
    for (name, chapters) in [
        ("Sell an API", &["Rust", "JavaScript", "No code", "MCP"][..]),
        ("Pay for one", &["CLI", "Rust", "JavaScript", "MCP"]),
        (
            "Run a facilitator",
            &[
                "Configuration",
                "Keys",
                "replicas",
                "Webhooks",
                "dashboard",
                "live",
            ],
        ),
        (
            "Reference",
            &["(reference/api.md)", "(security.md)", "(benchmarks.md)"],
        ),
    ] {
        let part = part(name);
        for chapter in chapters {
            assert!(
                part.lines()
                    .any(|l| l.trim_start().starts_with("- [") && l.contains(chapter)),
                "the part {name:?} has a chapter on {chapter:?}:\n{part}"
            );
        }
    }
    assert!(summary.contains("(concepts/"), "concepts");
    let mut linked = 0;
    for (_, target) in markdown_links(&readme) {
        if let Some(page) = target.strip_prefix("docs/src/") {
            let page = page.split('#').next().unwrap();
            if page == "SUMMARY.md" {
                continue;
            }
            assert!(
                root().join("docs/src").join(page).is_file(),
                "README links to docs/src/{page}"
            );
            assert!(
                summary.contains(&format!("]({page})")),
                "docs/src/{page} is in SUMMARY.md"
            );
            linked += 1;
        }
    }
    assert!(linked >= 8, "the README maps the book ({linked} links)");
}

/// `[text](target)` links of a markdown text, outside code.
fn markdown_links(text: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let label = rest[..at].rsplit('[').next().unwrap_or_default().to_owned();
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            links.push((label, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    links
}

/// Every shell block of the README and the book runs verbatim in a test: it follows a marker of
/// [`RUNNERS`], and the test named there exists and reads the block by that marker.
#[test]
fn book_shell_blocks_each_follow_a_marker_naming_the_test_that_runs_them() {
    let tests = root().join("crates/cli/tests/it");
    for (marker, test, file) in RUNNERS {
        // The module and its submodules (`golive.rs` and `golive/*.rs`).
        let mut source = std::fs::read_to_string(tests.join(file)).unwrap();
        if let Ok(dir) = std::fs::read_dir(tests.join(file.trim_end_matches(".rs"))) {
            for entry in dir {
                source.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
            }
        }
        assert!(
            source.contains(&format!("fn {test}(")),
            "{file} defines the test {test} that {marker} names"
        );
        assert!(
            source.contains(&format!("\"{marker}\"")),
            "{file} reads the block after {marker}"
        );
    }
    let mut used = BTreeSet::new();
    let mut unmarked = Vec::new();
    let mut pages = vec!["README.md".to_owned()];
    pages.extend(book_pages());
    for page in &pages {
        for (lang, line, before) in fences(&repo_file(page)) {
            if !matches!(lang.as_str(), "sh" | "bash" | "shell" | "zsh") {
                continue;
            }
            match RUNNERS.iter().find(|(marker, ..)| *marker == before) {
                Some((marker, ..)) => {
                    used.insert(*marker);
                }
                None => unmarked.push(format!("{page}:{line}")),
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks no test runs (put a marker of RUNNERS in book.rs, with its test, right \
         before each; or fence it as text if it is not meant to run verbatim): {unmarked:?}"
    );
    let unused: Vec<_> = RUNNERS
        .iter()
        .map(|(marker, ..)| *marker)
        .filter(|m| !used.contains(m))
        .collect();
    assert!(unused.is_empty(), "markers no block follows: {unused:?}");
}

/// mdBook, as `scripts/install-tools` pins it.
fn mdbook() -> PathBuf {
    let bin = root().join(".tools/mdbook/bin/mdbook");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/install-tools",
        bin.display()
    );
    bin
}

/// Every relative link and `#anchor` in the HTML mdBook builds from the book resolves: to a file
/// of the build, and to an `id` in it.
#[test]
fn book_links_resolve() {
    let out = tempfile::tempdir().unwrap();
    let built = std::process::Command::new(mdbook())
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "mdbook build docs: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let broken = broken_links(out.path());
    assert!(broken.is_empty(), "broken links in the book: {broken:#?}");
}

/// The broken relative links of the HTML under `dir`: `page: href`.
pub(crate) fn broken_links(dir: &Path) -> Vec<String> {
    fn html_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                html_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "html") {
                out.push(path);
            }
        }
    }
    fn attr_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
        let needle = format!("{attr}=\"");
        html.match_indices(&needle)
            .filter_map(|(at, _)| {
                let rest = &html[at + needle.len()..];
                rest.find('"').map(|end| &rest[..end])
            })
            .collect()
    }
    let mut pages = Vec::new();
    html_files(dir, &mut pages);
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut id_of = |page: &Path| -> BTreeSet<String> {
        ids.entry(page.to_owned())
            .or_insert_with(|| {
                let html = std::fs::read_to_string(page).unwrap_or_default();
                attr_values(&html, "id")
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            })
            .clone()
    };
    let mut broken = Vec::new();
    for page in &pages {
        // mdBook's 404 page links from the site's root, wherever it is served.
        if page.file_name().is_some_and(|n| n == "404.html") {
            continue;
        }
        let html = std::fs::read_to_string(page).unwrap();
        for href in attr_values(&html, "href") {
            if href.contains("://")
                || href.starts_with("mailto:")
                || href.starts_with("javascript:")
            {
                continue;
            }
            let (path, anchor) = href.split_once('#').unwrap_or((href, ""));
            let path = path.split('?').next().unwrap();
            let target = if path.is_empty() {
                page.clone()
            } else {
                let target = page.parent().unwrap().join(path);
                if target.is_dir() {
                    target.join("index.html")
                } else {
                    target
                }
            };
            let shown = format!("{}: {href}", page.strip_prefix(dir).unwrap().display());
            if !target.is_file() {
                broken.push(shown);
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "html")
                && !id_of(&target).contains(anchor)
            {
                broken.push(format!("{shown} (no such anchor)"));
            }
        }
    }
    broken
}

/// The book's page about the endpoints is what the facilitator's OpenAPI document says.
#[test]
fn book_api_reference_is_generated_from_openapi_json() {
    let page = api_reference(&tollgate_facilitator::openapi::document(
        "http://127.0.0.1:8402",
    ));
    let path = root().join(API_PAGE);
    if std::env::var(API_UPDATE_VAR).as_deref() == Ok("update") {
        std::fs::write(&path, &page).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != page {
        let line = committed
            .lines()
            .zip(page.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(page.lines().count()));
        panic!(
            "{API_PAGE} is not what /openapi.json says (first difference at line {}); \
             regenerate it: {API_UPDATE_VAR}=update cargo nextest run -p tollgate-cli -E \
             'test(book_api_reference_is_generated_from_openapi_json)'",
            line + 1
        );
    }
}

/// The last segment of a `$ref`.
fn ref_name(r: &str) -> &str {
    r.rsplit('/').next().unwrap_or(r)
}

/// A schema, named: its component, `array of` one, or its type.
fn schema_name(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        return format!("`{}`", ref_name(r));
    }
    if schema["type"] == "array" {
        return format!("array of {}", schema_name(&schema["items"]));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(options) = schema[key].as_array() {
            let names: Vec<String> = options.iter().map(schema_name).collect();
            return names.join(if key == "allOf" { " and " } else { " or " });
        }
    }
    match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    }
}

/// A body's content: its schema's name, and the media type when it is not JSON.
fn content(content: &Value) -> Option<String> {
    let map = content.as_object()?;
    let parts: Vec<String> = map
        .iter()
        .map(|(media, c)| {
            let name = if c["schema"].is_null() {
                String::new()
            } else {
                schema_name(&c["schema"])
            };
            if media == "application/json" {
                name
            } else if name.is_empty() || name == "string" {
                format!("`{media}`")
            } else {
                format!("{name} (`{media}`)")
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// One line of prose: a description with its line breaks joined.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The error codes a response component carries, from its examples.
fn error_codes(response: &Value) -> Vec<String> {
    let mut codes = Vec::new();
    if let Some(contents) = response["content"].as_object() {
        for c in contents.values() {
            if let Some(examples) = c["examples"].as_object() {
                for example in examples.values() {
                    if let Some(code) = example["value"]["error"]["code"].as_str() {
                        codes.push(format!("`{code}`"));
                    }
                }
            }
        }
    }
    codes
}

/// The page: every operation by tag, in the router's order, with its parameters, body and
/// answers; then the error responses and their codes.
fn api_reference(doc: &Value) -> String {
    let mut out = String::new();
    let info = &doc["info"];
    let _ = writeln!(out, "# Endpoints\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the facilitator's OpenAPI document by \
         crates/cli/tests/it/book.rs; do not edit. Regenerate: {API_UPDATE_VAR}=update cargo \
         nextest run -p tollgate-cli -E 'test(book_api_reference_is_generated_from_openapi_json)' \
         -->\n"
    );
    let _ = writeln!(
        out,
        "The facilitator's HTTP API as its OpenAPI {} document describes it (`GET /openapi.json`, \
         \"{}\" {}); this page is generated from it. What each group is for: [The HTTP \
         API](http-api.md).\n",
        doc["openapi"].as_str().unwrap_or_default(),
        info["title"].as_str().unwrap_or_default(),
        info["version"].as_str().unwrap_or_default(),
    );
    for paragraph in info["description"]
        .as_str()
        .unwrap_or_default()
        .split("\n\n")
    {
        let _ = writeln!(out, "{}\n", one_line(paragraph));
    }
    let methods = ["get", "put", "post", "patch", "delete"];
    let tags: Vec<(String, String)> = doc["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_owned(),
                t["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for (tag, description) in &tags {
        let _ = writeln!(out, "## {tag}\n\n{}\n", one_line(description));
        for path in tollgate_facilitator::openapi::paths() {
            for method in methods {
                let op = &doc["paths"][*path][method];
                if op.is_null()
                    || !op["tags"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t == tag.as_str()))
                {
                    continue;
                }
                write_operation(&mut out, doc, method, path, op);
            }
        }
    }
    let _ = writeln!(out, "## Error responses\n");
    let _ = writeln!(
        out,
        "Every error is `application/json` `{{\"error\": {{\"code\", \"message\"}}}}`; by status:\n"
    );
    let _ = writeln!(
        out,
        "| status | response | codes | when |\n|---|---|---|---|"
    );
    let responses = doc["components"]["responses"].as_object();
    let mut errors: Vec<(&String, &Value)> = responses.into_iter().flatten().collect();
    errors.sort_by_key(|(name, _)| status_of(doc, name));
    for (name, response) in errors {
        let _ = writeln!(
            out,
            "| {} | `{name}` | {} | {} |",
            status_of(doc, name).map_or_else(String::new, |s| s.to_string()),
            error_codes(response).join(", "),
            one_line(response["description"].as_str().unwrap_or_default()).replace('|', "\\|"),
        );
    }
    out
}

/// The status a response component is used with.
fn status_of(doc: &Value, name: &str) -> Option<u16> {
    let wanted = format!("#/components/responses/{name}");
    doc["paths"]
        .as_object()?
        .values()
        .flat_map(|item| item.as_object().into_iter().flatten())
        .flat_map(|(_, op)| op["responses"].as_object().into_iter().flatten())
        .find(|(_, r)| r["$ref"] == wanted.as_str())
        .and_then(|(status, _)| status.parse().ok())
}

fn write_operation(out: &mut String, doc: &Value, method: &str, path: &str, op: &Value) {
    let _ = writeln!(out, "### `{} {path}`\n", method.to_uppercase());
    let _ = writeln!(
        out,
        "{}\n",
        one_line(op["summary"].as_str().unwrap_or_default())
    );
    if let Some(description) = op["description"].as_str() {
        let _ = writeln!(out, "{}\n", one_line(description));
    }
    if let Some(id) = op["operationId"].as_str() {
        let _ = writeln!(out, "- operation: `{id}`");
    }
    if let Some(security) = op["security"].as_array() {
        let schemes: Vec<String> = security
            .iter()
            .filter_map(Value::as_object)
            .flat_map(|s| s.keys().map(|k| format!("`{k}`")))
            .collect();
        if !schemes.is_empty() {
            let _ = writeln!(out, "- authentication: {}", schemes.join(" or "));
        }
    }
    for parameter in op["parameters"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "- {} `{}`{}: {}{}",
            parameter["in"].as_str().unwrap_or_default(),
            parameter["name"].as_str().unwrap_or_default(),
            if parameter["required"] == true {
                " (required)"
            } else {
                ""
            },
            schema_name(&parameter["schema"]),
            parameter["description"]
                .as_str()
                .map(|d| format!(". {}", one_line(d)))
                .unwrap_or_default(),
        );
    }
    if let Some(body) = content(&op["requestBody"]["content"]) {
        let required = if op["requestBody"]["required"] == true {
            ""
        } else {
            " (optional)"
        };
        let _ = writeln!(out, "- request body{required}: {body}");
    }
    let _ = writeln!(out, "\n| status | body | detail |\n|---|---|---|");
    for (status, response) in op["responses"].as_object().into_iter().flatten() {
        let (body, what) = match response["$ref"].as_str() {
            Some(r) => {
                let component = &doc["components"]["responses"][ref_name(r)];
                (
                    format!("`{}`", ref_name(r)),
                    error_codes(component).join(", "),
                )
            }
            None => (
                content(&response["content"]).unwrap_or_default(),
                one_line(response["description"].as_str().unwrap_or_default()),
            ),
        };
        let _ = writeln!(out, "| {status} | {body} | {} |", what.replace('|', "\\|"));
    }
    let _ = writeln!(out);
}

/// The `tollgate` binary's directory first on `PATH`, as after the build.
fn path_with_tollgate() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_tollgate")).parent().unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The quick start's two commands (the README's and the book's, the same), run: the first as
/// the test binary it builds (`tollgate dev`, on free ports and a state directory of the test's),
/// the second is what `.ci/run` runs; then the 30-second demo, verbatim, against it: a 402, then
/// `tollgate pay` paid on the devnet and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_quick_start_runs_dev_and_the_demo_pays() {
    tollgate_chain::install_crypto_provider();
    let quick = readme::commands("README.md", "<!-- quickstart -->");
    assert_eq!(
        quick,
        readme::commands("docs/src/quick-start.md", "<!-- quickstart -->"),
        "the README's quick start is the book's"
    );
    let demo = readme::commands("README.md", "<!-- demo -->");
    assert_eq!(
        demo,
        readme::commands("docs/src/quick-start.md", "<!-- demo -->"),
        "the README's demo is the book's"
    );
    let [run, test] = &quick[..] else {
        panic!("two commands: {quick:?}")
    };
    // `cargo run --release -p tollgate-cli -- ARGS`: the `tollgate` binary with ARGS.
    let args: Vec<&str> = run
        .split('#')
        .next()
        .unwrap()
        .strip_prefix("cargo run --release -p tollgate-cli -- ")
        .unwrap_or_else(|| panic!("cargo run of tollgate-cli: {run}"))
        .split_whitespace()
        .collect();
    assert_eq!(args, ["dev"], "{run}");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let script = test.split('#').next().unwrap().trim();
    assert!(
        ci.lines().any(|l| l == format!("exec {script}")),
        "CI runs the quick start's second command ({script}): {ci}"
    );

    let state = tempfile::tempdir().unwrap();
    let dev = crate::dev::spawn_dev(state.path(), &[]).await;
    let info = &dev.info;
    let chain = tollgate_testkit::connect(
        info["rpcUrl"].as_str().unwrap(),
        info["chainId"].as_u64().unwrap(),
        &[],
    )
    .await
    .unwrap();
    let chain: Arc<dyn tollgate_chain::Chain> = Arc::new(chain);
    let token: Address = info["contracts"]["token"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let account = |role: &str| {
        info["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["role"] == role)
            .unwrap()
            .clone()
    };
    let provider: Address = account("provider")["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let payer = account("payer");
    let balance = |who: Address| {
        let chain = Arc::clone(&chain);
        async move {
            contracts::read(&*chain, token, &Token::balanceOfCall { account: who })
                .await
                .unwrap()
        }
    };
    let before = balance(provider).await;

    let dir = tempfile::tempdir().unwrap();
    let mut w = Walk::new(
        demo,
        dir.path().to_owned(),
        BTreeMap::from([
            ("PATH".to_owned(), path_with_tollgate()),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ]),
    );
    w.set("API", info["apiUrl"].as_str().unwrap());
    w.set("TOLLGATE_KEY", payer["privateKey"].as_str().unwrap());
    let offer = w.run("curl -si $API/v1/quote").await.ok();
    assert!(offer.stdout.starts_with("HTTP/1.1 402"), "{}", offer.stdout);
    assert!(
        offer.stdout.contains("\"500000\""),
        "0.50: {}",
        offer.stdout
    );
    let paid = w.run("tollgate pay $API/v1/quote --max 0.50").await.ok();
    assert!(paid.stdout.contains("ETH/USD"), "the quote: {paid:?}");
    w.done();
    assert_eq!(
        balance(provider).await,
        before + U256::from(500_000 - 1_000),
        "the provider got 0.50 less the fee, once"
    );
}

/// The devnet chapter's example: curl reads the token's decimals from `tollgate devnet` over
/// JSON-RPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_devnet_example_reads_the_token_over_json_rpc() {
    let commands = readme::commands("docs/src/run/devnet.md", "<!-- devnet -->");
    let state = tempfile::tempdir().unwrap();
    let devnet = crate::devnet::spawn_devnet(state.path(), &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut w = Walk::new(
        commands,
        dir.path().to_owned(),
        BTreeMap::from([("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())]),
    );
    w.set("RPC", devnet.info.rpc_url.clone().unwrap());
    let out = w.run("curl -s -X POST").await.ok().json();
    assert_eq!(
        out["result"],
        format!("0x{:064x}", 6),
        "Token.decimals() is 6: {out}"
    );
    w.done();
}
