//! No test passes by skipping: every PostgreSQL test, run alone without
//! `TOLLGATE_TEST_DATABASE_URL`, fails and says what to set (they returned early and passed).

use tollgate_testkit::peer::{DATABASE_URL_VAR, SET_DATABASE_URL, assert_fails_without_peer};

/// Every test of this binary that needs PostgreSQL (one of the `store::postgres` cases stands
/// for the others: they share one lookup).
const ON_POSTGRES: &[&str] = &[
    "analytics::volume_counts_each_settled_payment_once_on_postgres",
    "analytics::revenue_counts_first_cycles_renewals_and_overage_on_postgres",
    "analytics::huge_amounts_saturate_the_rollups_on_postgres",
    "analytics::saturated_rows_add_up_on_postgres",
    "authorize::happy_path_on_postgres",
    "keeper::keeper_rows_are_idempotent_on_postgres",
    "metering::concurrent_deductions_never_cross_the_cap_on_postgres",
    "properties::ledger_matches_the_model_on_postgres",
    "relays::the_bound_holds_across_replicas_on_postgres",
    "relays::relay_counts_on_postgres",
    "replicas::leases_on_postgres",
    "replicas::replicas_lease_relayers_and_settle_each_payment_once",
    "store::postgres::round_trip",
    "store::postgres_schema_names_are_checked",
    "usdc_subscriptions::renewals_that_can_never_succeed_fail_once_and_never_block_the_others_on_postgres",
    "usdc_subscriptions::a_collect_refused_every_time_is_marked_stuck_once_and_left_alone_on_postgres",
    "webhooks::delivery::an_endpoint_down_then_up_gets_every_event_once_in_order_on_postgres",
    "webhooks::secrets::webhook_secrets_are_encrypted_at_rest_in_postgres",
];

#[test]
fn postgres_tests_fail_without_the_database_url() {
    for name in ON_POSTGRES {
        assert_fails_without_peer(name, &[(DATABASE_URL_VAR, None)], SET_DATABASE_URL);
    }
}
