-- x402 V2 `payment-identifier` ids at `/settle`: the hash of (payer, id) and the settlement key
-- of the payload it was first sent with. The same id with the same payload is that settlement's
-- retry; with another payload, a conflict, unless the first settlement failed (then the id moves
-- to the new payload). Hashes are 0x-hex; timestamps unix seconds.
CREATE TABLE payment_identifiers (
    id_hash        TEXT    NOT NULL PRIMARY KEY,
    settlement_key TEXT    NOT NULL,
    created_at     INTEGER NOT NULL CHECK (created_at >= 0)
) STRICT;
