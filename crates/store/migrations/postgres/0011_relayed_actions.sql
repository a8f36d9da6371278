-- Relayed lifecycle transactions: each pause, resume, cancel or allowance raise the facilitator
-- sent for a subscriber at its own gas, to bound them (at most so many per subscription within
-- one window, per subscriber within another). `at` is unix seconds on the network's clock. A
-- subscriber's rows older than the longest window are deleted when its next relay is counted.
CREATE TABLE relayed_actions (
    seq          BIGSERIAL PRIMARY KEY,
    network      TEXT   NOT NULL,
    subscription TEXT   NOT NULL,
    subscriber   TEXT   NOT NULL,
    action       TEXT   NOT NULL,
    at           BIGINT NOT NULL CHECK (at >= 0)
);
CREATE INDEX relayed_actions_subscriber ON relayed_actions (network, subscriber, at);
CREATE INDEX relayed_actions_subscription ON relayed_actions (network, subscription, at);

-- One row per subscriber, written first by every count: its row lock makes a count by another
-- replica wait until this one commits (PostgreSQL), so that two never both take the last slot.
CREATE TABLE relay_subscribers (
    network    TEXT   NOT NULL,
    subscriber TEXT   NOT NULL,
    counted_at BIGINT NOT NULL CHECK (counted_at >= 0),
    PRIMARY KEY (network, subscriber)
);
