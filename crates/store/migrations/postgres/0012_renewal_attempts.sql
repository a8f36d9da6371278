-- The renewal keeper's bound on collections it cannot make: a `collect` refused at simulation
-- for a reason it does not expect (anything but WrongCycle, NotDue or SubscriptionNotActive) is
-- counted per subscription and cycle; at the keeper's limit the subscription is marked stuck
-- (`stuck_at`, with one `subscription.renewal_stuck` event), left out of the due set, and shown on
-- the dashboard, until the chain's state of the subscription changes: any of its events indexed
-- by the keeper, or a collection recorded, deletes its row. Timestamps are unix seconds.
CREATE TABLE renewal_attempts (
    network     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    cycle       BIGINT  NOT NULL CHECK (cycle >= 0),
    attempts    BIGINT  NOT NULL CHECK (attempts >= 1),
    last_error  TEXT    NOT NULL,
    stuck_at    BIGINT  CHECK (stuck_at >= 0),
    updated_at  BIGINT  NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (network, id)
);
