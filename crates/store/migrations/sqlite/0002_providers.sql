-- Provider self-registration and plan ownership. Hashes and addresses are lowercase 0x-hex TEXT;
-- timestamps are unix seconds. STRICT refuses values of the wrong type.

-- A challenge a provider signs (EIP-191 personal_sign) to get an API key. Keyed by the
-- keccak-256 of its text; `used_at` is set once, when a registration consumes it.
CREATE TABLE provider_challenges (
    challenge_hash  TEXT    NOT NULL PRIMARY KEY,
    address         TEXT    NOT NULL,
    expires_at      INTEGER NOT NULL CHECK (expires_at >= 0),
    created_at      INTEGER NOT NULL CHECK (created_at >= 0),
    used_at         INTEGER CHECK (used_at >= 0)
) STRICT;

-- Which provider owns a plan the facilitator created for it, and which relayer created it (the
-- plan's on-chain provider and operator, the account that can deprecate it).
CREATE TABLE plans (
    network     TEXT    NOT NULL,
    plan_id     TEXT    NOT NULL,
    provider    TEXT    NOT NULL,
    relayer     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL CHECK (created_at >= 0),
    PRIMARY KEY (network, plan_id)
) STRICT;

CREATE INDEX plans_provider ON plans (provider);
