-- Settlements: one row per EIP-3009 authorization (the key), and the provider API keys.
-- Hashes and addresses are lowercase 0x-hex TEXT; money is decimal TEXT (uint256 fits no
-- integer column); timestamps are unix seconds. `request` is TEXT, not JSONB, so the signed
-- request is kept byte for byte.

CREATE TABLE settlements (
    key           TEXT    NOT NULL PRIMARY KEY,
    kind          TEXT    NOT NULL CHECK (kind IN ('router', 'x402')),
    request_hash  TEXT    NOT NULL,
    network       TEXT    NOT NULL,
    chain_id      BIGINT  NOT NULL CHECK (chain_id >= 0),
    token         TEXT    NOT NULL,
    payer         TEXT    NOT NULL,
    pay_to        TEXT    NOT NULL,
    amount        TEXT    NOT NULL,
    fee           TEXT    NOT NULL,
    memo          TEXT    NOT NULL,
    nonce         TEXT    NOT NULL,
    valid_before  BIGINT  NOT NULL CHECK (valid_before >= 0),
    request       TEXT    NOT NULL,
    status        TEXT    NOT NULL
                  CHECK (status IN ('received', 'submitted', 'pending', 'confirmed', 'failed')),
    tx_hash       TEXT,
    block         BIGINT  CHECK (block >= 0),
    proof         TEXT,
    error         TEXT,
    created_at    BIGINT  NOT NULL CHECK (created_at >= 0),
    updated_at    BIGINT  NOT NULL CHECK (updated_at >= 0)
);

-- `unfinished()` and `count_by_status()`.
CREATE INDEX settlements_status_created_at ON settlements (status, created_at);
-- Finding a settlement by its transaction.
CREATE INDEX settlements_tx_hash ON settlements (tx_hash);

CREATE TABLE api_keys (
    key_hash    TEXT    NOT NULL PRIMARY KEY,
    provider    TEXT    NOT NULL,
    label       TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL CHECK (created_at >= 0),
    revoked_at  BIGINT  CHECK (revoked_at >= 0)
);
