-- The hash of the client's claim secret (`keccak256(claim)`, 0x-hex) on `/authorize`
-- settlements: repeats of the request and the status URL hand out the proof only to its holder.
-- NULL for settlements made without a claim (and on the x402 path).
ALTER TABLE settlements ADD COLUMN claim_hash TEXT;
