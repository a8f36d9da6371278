//! The workspace's dependency rules (ARCHITECTURE.md), checked on the resolved graph of
//! `cargo metadata`:
//!
//! - the SDK crates (protocol, chain, client, gate, agent) never depend, through normal
//!   dependencies at any depth, on the facilitator, its store, the devnet, the testkit or the cli;
//! - `tollgate-protocol` depends on no other Tollgate crate;
//! - nothing depends on `tollgate-cli`;
//! - the agent and the gate compile no EVM (`revm`) and no server framework (`axum`);
//! - the gate reaches the store only through its memo-store features, and compiles no database
//!   driver unless one of them asks: none by default, only SQLite's with `sqlite`, only
//!   PostgreSQL's with `postgres`.
//!
//! `cargo metadata` resolves features once for the whole workspace, so an optional dependency some
//! other crate switches on (alloy's GCP signer, which brings tonic's axum) shows under every user
//! of alloy. The last rule therefore asks `cargo tree -p <crate> -e normal`, which resolves the
//! crate's features as a third party building it alone would.
//!
//! `TOLLGATE_ARCHITECTURE_MANIFEST` points the check at another checkout's `Cargo.toml`.
#![allow(missing_docs)]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::Command,
};

use serde_json::Value;

/// The crates a third party builds against.
const SDK: &[&str] = &[
    "tollgate-protocol",
    "tollgate-chain",
    "tollgate-client",
    "tollgate-gate",
    "tollgate-agent",
];

/// What no SDK crate may reach.
const NOT_FOR_SDK: &[&str] = &[
    "tollgate-facilitator",
    "tollgate-store",
    "tollgate-devnet",
    "tollgate-testkit",
    "tollgate-cli",
];

/// Crates the SDKs that run inside other people's programs (agent, gate) must not compile.
const NOT_FOR_EMBEDDING: &[&str] = &["revm", "axum"];

/// Edges an SDK crate may have to a crate of [`NOT_FOR_SDK`] because a feature of its own asks
/// for them (the gate's durable memo stores, on the store's seam); what the features bring is
/// checked by [`GATE_DATABASES`].
const FEATURE_EDGES: &[(&str, &str)] = &[("tollgate-gate", "tollgate-store")];

/// Per feature set of the gate (built alone, without its default features), the database crates
/// it must not compile.
const GATE_DATABASES: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "tollgate-store",
            "sqlx-core",
            "sqlx-sqlite",
            "libsqlite3-sys",
            "sqlx-postgres",
        ],
    ),
    (
        "default",
        &["tollgate-store", "sqlx-core", "libsqlite3-sys"],
    ),
    ("sqlite", &["sqlx-postgres"]),
    ("postgres", &["sqlx-sqlite", "libsqlite3-sys"]),
];

/// The resolved graph: package name → names of its normal (non-dev, non-build) dependencies, and
/// package name → names of every dependency of any kind.
struct Graph {
    normal: BTreeMap<String, BTreeSet<String>>,
    any: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn load() -> Self {
        let out = cargo(&["metadata", "--format-version", "1"]);
        let meta: Value = serde_json::from_slice(&out).expect("cargo metadata JSON");
        let names: BTreeMap<&str, &str> = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
            .collect();
        let mut normal = BTreeMap::<String, BTreeSet<String>>::new();
        let mut any = BTreeMap::<String, BTreeSet<String>>::new();
        for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
            let name = names[node["id"].as_str().unwrap()].to_owned();
            let normal_deps = normal.entry(name.clone()).or_default();
            let any_deps = any.entry(name).or_default();
            for dep in node["deps"].as_array().expect("deps") {
                let dep_name = names[dep["pkg"].as_str().unwrap()].to_owned();
                let is_normal = dep["dep_kinds"]
                    .as_array()
                    .expect("dep_kinds")
                    .iter()
                    .any(|k| k["kind"].is_null());
                if is_normal {
                    normal_deps.insert(dep_name.clone());
                }
                any_deps.insert(dep_name);
            }
        }
        Self { normal, any }
    }

    /// Every package `root` reaches through normal dependencies, with the path to each.
    fn normal_closure(&self, root: &str) -> BTreeMap<String, Vec<String>> {
        let mut seen = BTreeMap::new();
        let mut stack = vec![vec![root.to_owned()]];
        while let Some(path) = stack.pop() {
            let last = path.last().unwrap();
            for dep in self.normal.get(last).into_iter().flatten() {
                if FEATURE_EDGES.contains(&(last.as_str(), dep.as_str())) {
                    continue;
                }
                if !seen.contains_key(dep) {
                    let mut next = path.clone();
                    next.push(dep.clone());
                    seen.insert(dep.clone(), next.clone());
                    stack.push(next);
                }
            }
        }
        seen
    }
}

/// The workspace manifest checked.
fn manifest() -> PathBuf {
    std::env::var_os("TOLLGATE_ARCHITECTURE_MANIFEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"))
}

/// Runs cargo with `args` on the checked workspace; its stdout.
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .arg("--manifest-path")
        .arg(manifest())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The packages `root` compiles as a dependency of its own (normal edges, its own features).
fn compiled_by(root: &str) -> BTreeSet<String> {
    compiled_with(root, &[])
}

/// [`compiled_by`] with extra arguments choosing the features.
fn compiled_with(root: &str, features: &[&str]) -> BTreeSet<String> {
    let mut args = vec![
        "tree", "-p", root, "-e", "normal", "--prefix", "none", "--format", "{p}",
    ];
    args.extend(features);
    let out = cargo(&args);
    String::from_utf8(out)
        .expect("cargo tree output")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The violations of `forbidden` in `root`'s normal closure, each with its path.
fn reaches(graph: &Graph, root: &str, forbidden: &[&str]) -> Vec<String> {
    let closure = graph.normal_closure(root);
    forbidden
        .iter()
        .filter_map(|f| closure.get(*f).map(|path| path.join(" -> ")))
        .collect()
}

#[test]
fn dependency_rules_hold() {
    let graph = Graph::load();
    let mut violations = Vec::new();
    for sdk in SDK {
        assert!(
            graph.normal.contains_key(*sdk),
            "{sdk} is not in the workspace"
        );
        violations.extend(reaches(&graph, sdk, NOT_FOR_SDK));
    }
    for embedded in ["tollgate-agent", "tollgate-gate"] {
        let compiled = compiled_by(embedded);
        for f in NOT_FOR_EMBEDDING {
            if compiled.contains(*f) {
                violations.push(format!(
                    "{embedded} compiles {f} (cargo tree -p {embedded} -e normal -i {f})"
                ));
            }
        }
    }
    for &(features, forbidden) in GATE_DATABASES {
        let args: &[&str] = match features {
            "default" => &[],
            "" => &["--no-default-features"],
            f => &["--no-default-features", "--features", f],
        };
        let compiled = compiled_with("tollgate-gate", args);
        for f in forbidden {
            if compiled.contains(*f) {
                violations.push(format!(
                    "tollgate-gate with features [{features}] compiles {f} (cargo tree -p \
                     tollgate-gate -e normal {} -i {f})",
                    args.join(" ")
                ));
            }
        }
    }
    for dep in &graph.normal["tollgate-protocol"] {
        if dep.starts_with("tollgate-") {
            violations.push(format!("tollgate-protocol -> {dep}"));
        }
    }
    for (package, deps) in &graph.any {
        if deps.contains("tollgate-cli") {
            violations.push(format!("{package} -> tollgate-cli"));
        }
    }
    assert!(
        violations.is_empty(),
        "dependency rules broken (see ARCHITECTURE.md):\n  {}",
        violations.join("\n  ")
    );
}
