-- Webhooks: providers' endpoints, the event outbox and one delivery row per (endpoint, event).
-- An event is inserted in the same transaction as the state change that causes it (a confirmed
-- or failed settlement, a refused deduction, the keeper's cursor move over the chain's logs),
-- together with a pending delivery for every enabled endpoint of its provider whose filter takes
-- it. Hashes and addresses are lowercase 0x-hex TEXT; timestamps are unix seconds.

-- A provider's endpoint. `secret` (whsec_…) signs deliveries; during a rotation `old_secret`
-- signs them too until `old_secret_expires_at`. `events` is `*` or a comma-separated list.
CREATE TABLE webhook_endpoints (
    id                     TEXT    NOT NULL PRIMARY KEY,
    provider               TEXT    NOT NULL,
    url                    TEXT    NOT NULL,
    events                 TEXT    NOT NULL,
    description            TEXT    NOT NULL,
    secret                 TEXT    NOT NULL,
    old_secret             TEXT,
    old_secret_expires_at  BIGINT  CHECK (old_secret_expires_at >= 0),
    enabled                BIGINT  NOT NULL CHECK (enabled IN (0, 1)),
    disabled_reason        TEXT,
    created_at             BIGINT  NOT NULL CHECK (created_at >= 0),
    updated_at             BIGINT  NOT NULL CHECK (updated_at >= 0)
);

CREATE INDEX webhook_endpoints_provider ON webhook_endpoints (provider);

-- The outbox: every event, in order (`seq`), with a stable id (`webhook-id`) derived from its
-- cause, so that the same cause never makes two events.
CREATE TABLE events (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT    NOT NULL UNIQUE,
    provider    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL CHECK (created_at >= 0)
);

CREATE INDEX events_provider ON events (provider, seq);

-- One row per (endpoint, event) to deliver.
CREATE TABLE webhook_deliveries (
    endpoint_id      TEXT    NOT NULL,
    event_seq        BIGINT  NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         BIGINT  NOT NULL CHECK (attempts >= 0),
    next_attempt_at  BIGINT  NOT NULL CHECK (next_attempt_at >= 0),
    last_status      BIGINT ,
    last_error       TEXT,
    updated_at       BIGINT  NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (endpoint_id, event_seq)
);

CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, event_seq)
    WHERE state = 'pending';
