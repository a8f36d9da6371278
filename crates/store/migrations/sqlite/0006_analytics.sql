-- Analytics: the resource a settlement paid for, hourly and daily rollups of settled volume kept
-- in the same transaction as the confirmation (so they never disagree with `settlements`), the
-- indexes the dashboard reads through, and dashboard login sessions. Amounts in the rollups are
-- integer units of the token, saturated at 2^63 - 1 (far above any real volume); timestamps are
-- unix seconds. STRICT refuses values of the wrong type.

-- The URL paid for (query and fragment dropped), when known.
ALTER TABLE settlements ADD COLUMN resource TEXT;

-- Recent payments of a payee.
CREATE INDEX settlements_pay_to_updated_at ON settlements (pay_to, updated_at);

-- Settled volume per payee, hour, network and resource ('' when unknown).
CREATE TABLE volume_rollups (
    pay_to    TEXT    NOT NULL,
    hour      INTEGER NOT NULL CHECK (hour >= 0 AND hour % 3600 = 0),
    network   TEXT    NOT NULL,
    resource  TEXT    NOT NULL,
    payments  INTEGER NOT NULL CHECK (payments > 0),
    gross     INTEGER NOT NULL CHECK (gross >= 0),
    fees      INTEGER NOT NULL CHECK (fees >= 0),
    PRIMARY KEY (pay_to, hour, network, resource)
) STRICT;

-- Settled volume per payee, UTC day and payer (payers are many: a day keeps the table small).
CREATE TABLE payer_rollups (
    pay_to    TEXT    NOT NULL,
    day       INTEGER NOT NULL CHECK (day >= 0 AND day % 86400 = 0),
    payer     TEXT    NOT NULL,
    payments  INTEGER NOT NULL CHECK (payments > 0),
    gross     INTEGER NOT NULL CHECK (gross >= 0),
    fees      INTEGER NOT NULL CHECK (fees >= 0),
    PRIMARY KEY (pay_to, day, payer)
) STRICT;

-- What was settled before this migration.
INSERT INTO volume_rollups (pay_to, hour, network, resource, payments, gross, fees)
    SELECT pay_to, updated_at - updated_at % 3600, network, '', COUNT(*),
           MIN(SUM(MIN(CAST(amount AS REAL), 9.2e18)), 9.2e18),
           MIN(SUM(MIN(CAST(fee AS REAL), 9.2e18)), 9.2e18)
    FROM settlements WHERE status = 'confirmed'
    GROUP BY pay_to, updated_at - updated_at % 3600, network;
INSERT INTO payer_rollups (pay_to, day, payer, payments, gross, fees)
    SELECT pay_to, updated_at - updated_at % 86400, payer, COUNT(*),
           MIN(SUM(MIN(CAST(amount AS REAL), 9.2e18)), 9.2e18),
           MIN(SUM(MIN(CAST(fee AS REAL), 9.2e18)), 9.2e18)
    FROM settlements WHERE status = 'confirmed'
    GROUP BY pay_to, updated_at - updated_at % 86400, payer;

-- Subscription, allowance and plan events of a provider in a time range.
CREATE INDEX events_provider_type ON events (provider, type, created_at);

-- Metered usage in a time range.
CREATE INDEX usage_records_created_at ON usage_records (created_at);

-- Delivery health per endpoint.
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (endpoint_id, state, updated_at);

-- A dashboard login: the keccak-256 of the session token in the cookie, and the API key (by its
-- hash) it was opened with, so revoking the key ends the session.
CREATE TABLE dashboard_sessions (
    token_hash  TEXT    NOT NULL PRIMARY KEY,
    key_hash    TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL CHECK (expires_at >= 0),
    created_at  INTEGER NOT NULL CHECK (created_at >= 0)
) STRICT;

-- Subscriptions of a provider's plans by state.
CREATE INDEX subscriptions_index_plan ON subscriptions_index (network, plan_id, state);
