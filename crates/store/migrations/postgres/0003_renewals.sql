-- The renewal keeper: subscriptions discovered from `SubscriptionCreated` logs, a per-network log
-- cursor, and one row per collected (or failed) cycle. Hashes and addresses are lowercase 0x-hex
-- TEXT; timestamps are unix seconds (the chain's clock for `next_due`).

-- The next block to scan for subscription events, per network.
CREATE TABLE keeper_cursors (
    network     TEXT    NOT NULL PRIMARY KEY,
    next_block  BIGINT  NOT NULL CHECK (next_block >= 0),
    updated_at  BIGINT  NOT NULL CHECK (updated_at >= 0)
);

-- Every subscription the keeper knows, with the state and next due time it last saw. The chain
-- stays the truth: the keeper re-reads a subscription before collecting it.
CREATE TABLE subscriptions_index (
    network     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    plan_id     TEXT    NOT NULL,
    subscriber  TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('active', 'paused', 'cancelled')),
    cycle       BIGINT  NOT NULL CHECK (cycle >= 0),
    next_due    BIGINT  NOT NULL CHECK (next_due >= 0),
    updated_at  BIGINT  NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (network, id)
);

-- `due_subscriptions()`.
CREATE INDEX subscriptions_index_due ON subscriptions_index (network, state, next_due);

-- One row per (subscription, cycle) the keeper collected or saw fail; first writer wins.
CREATE TABLE renewals (
    network     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    cycle       BIGINT  NOT NULL CHECK (cycle >= 0),
    outcome     TEXT    NOT NULL CHECK (outcome IN ('renewed', 'failed')),
    tx_hash     TEXT    NOT NULL,
    block       BIGINT  NOT NULL CHECK (block >= 0),
    created_at  BIGINT  NOT NULL CHECK (created_at >= 0),
    PRIMARY KEY (network, id, cycle)
);
