//! No test passes by skipping: the webhook interop tests without `node`, and the PostgreSQL memo
//! store's tests without `TOLLGATE_TEST_DATABASE_URL`, run alone, fail and say how to install or
//! what to set.

use tollgate_testkit::peer::{INSTALL_TOOLS, TOOLS_DIR_VAR, assert_fails_without_peer};

const WEBHOOK: &[&str] = &[
    "webhook::the_reference_vector_matches_the_library",
    "webhook::the_reference_signature_passes_verify_webhook",
];

#[test]
fn webhook_interop_fails_without_node() {
    for name in WEBHOOK {
        assert_fails_without_peer(name, &[("PATH", Some("/nonexistent"))], INSTALL_TOOLS);
    }
}

#[test]
fn webhook_interop_fails_without_the_pinned_package() {
    for name in WEBHOOK {
        assert_fails_without_peer(
            name,
            &[(TOOLS_DIR_VAR, Some("/nonexistent"))],
            INSTALL_TOOLS,
        );
    }
}

#[cfg(feature = "postgres")]
#[test]
fn memo_store_tests_fail_without_the_database_url() {
    use tollgate_testkit::peer::{DATABASE_URL_VAR, SET_DATABASE_URL};
    for name in [
        "store::postgres_claims_are_atomic_and_pruned",
        "store::replicas_starting_at_once_all_open_the_store",
        "store::two_replicas_share_one_memo_set",
    ] {
        assert_fails_without_peer(name, &[(DATABASE_URL_VAR, None)], SET_DATABASE_URL);
    }
}
