-- Metered usage: the overage allowance ledger per (subscription, cycle), each deduction, and the
-- on-chain `chargeOverage` batches. Amounts are integer units of the token (at most 2^63 - 1, far
-- above any real cap; larger caps are stored saturated, which only ever lowers them). Hashes and
-- addresses are lowercase 0x-hex TEXT; timestamps are unix seconds.

-- One row per (subscription, cycle) with usage: the cap read from the chain, what was deducted
-- (`used`), put into on-chain charges (`billed`), confirmed (`charged`) or failed (`unpaid`).
-- `closed` is set when the cycle ends (before the keeper renews): no deduction lands after it.
CREATE TABLE allowance_cycles (
    network            TEXT    NOT NULL,
    id                 TEXT    NOT NULL,
    cycle              BIGINT  NOT NULL CHECK (cycle >= 0),
    cap                BIGINT  NOT NULL CHECK (cap >= 0),
    used               BIGINT  NOT NULL CHECK (used >= 0 AND used <= cap),
    billed             BIGINT  NOT NULL CHECK (billed >= 0 AND billed <= used),
    charged            BIGINT  NOT NULL CHECK (charged >= 0),
    unpaid             BIGINT  NOT NULL CHECK (unpaid >= 0 AND charged + unpaid <= billed),
    deductions         BIGINT  NOT NULL CHECK (deductions >= 0),
    charges            BIGINT  NOT NULL CHECK (charges >= 0),
    closed             BIGINT  NOT NULL CHECK (closed IN (0, 1)),
    first_unbilled_at  BIGINT  CHECK (first_unbilled_at >= 0),
    updated_at         BIGINT  NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (network, id, cycle)
);

-- `cycles_to_bill()`.
CREATE INDEX allowance_cycles_unbilled ON allowance_cycles (network, first_unbilled_at)
    WHERE used > billed;

-- Every deduction, in order (`seq` is the cycle's deduction count after it).
CREATE TABLE usage_records (
    network          TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    cycle            BIGINT  NOT NULL CHECK (cycle >= 0),
    seq              BIGINT  NOT NULL CHECK (seq > 0),
    amount           BIGINT  NOT NULL CHECK (amount > 0),
    idempotency_key  TEXT,
    created_at       BIGINT  NOT NULL CHECK (created_at >= 0),
    PRIMARY KEY (network, id, cycle, seq)
);

CREATE UNIQUE INDEX usage_records_key ON usage_records (network, id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- One row per `chargeOverage(id, cycle, amount, reference)`, written before it is sent; the
-- reference makes a resend after a crash a no-op on-chain (`ChargeAlreadyApplied`).
CREATE TABLE overage_charges (
    network     TEXT    NOT NULL,
    reference   TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    cycle       BIGINT  NOT NULL CHECK (cycle >= 0),
    amount      BIGINT  NOT NULL CHECK (amount > 0),
    relayer     TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'confirmed', 'failed')),
    tx_hash     TEXT,
    block       BIGINT  CHECK (block >= 0),
    error       TEXT,
    created_at  BIGINT  NOT NULL CHECK (created_at >= 0),
    updated_at  BIGINT  NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (network, reference)
);

CREATE INDEX overage_charges_pending ON overage_charges (network, created_at)
    WHERE state = 'pending';
CREATE INDEX overage_charges_subscription ON overage_charges (network, id, cycle);
