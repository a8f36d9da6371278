//! No test passes by skipping: the x402 interop and conformance tests, the MPP rows and the
//! dashboard's browser test, run alone without `node` or without the pinned packages, fail and
//! say how to install them.

use tollgate_testkit::peer::{INSTALL_TOOLS, TOOLS_DIR_VAR, assert_fails_without_peer};

/// One test per way of finding the peers (the others in each file share it).
const NEED_NODE: &[&str] = &[
    "interop::x402_fetch_pays_tollgate_dev_quote",
    "conformance::x402_fetch_v2_pays_tollgate_gate_on_devnet",
    "conformance::x402_fetch_v2_pays_x402_express_through_tollgate_facilitator_on_devnet",
    "dashboard::the_dashboard_shows_what_the_analytics_api_returns",
    // Its packages are in a tree of their own, .tools/mpp.
    "mpp::mppx_client_pays_mppx_server_through_tollgate_facilitator_on_devnet",
];

#[test]
fn node_tests_fail_without_node() {
    for name in NEED_NODE {
        assert_fails_without_peer(name, &[("PATH", Some("/nonexistent"))], INSTALL_TOOLS);
    }
}

#[test]
fn node_tests_fail_without_the_pinned_packages() {
    for name in NEED_NODE.iter().chain(&[
        // Also needs the pinned Python venv.
        "conformance::python_x402_v2_pays_tollgate_gate_on_devnet",
    ]) {
        assert_fails_without_peer(
            name,
            &[(TOOLS_DIR_VAR, Some("/nonexistent"))],
            INSTALL_TOOLS,
        );
    }
}
