-- Revenue from subscriptions: first cycles, renewals and overage charges the chain confirmed,
-- per provider (the plan's owner), hour, network and kind, booked in the transaction that records
-- the fact's event (once per event id, so a replayed log range books nothing twice). One-time
-- payments stay in `volume_rollups`. Amounts are integer units of the token, saturated at
-- 2^63 - 1; timestamps are unix seconds. STRICT refuses values of the wrong type.

CREATE TABLE revenue_rollups (
    provider  TEXT    NOT NULL,
    hour      INTEGER NOT NULL CHECK (hour >= 0 AND hour % 3600 = 0),
    network   TEXT    NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('first_cycle', 'renewal', 'overage')),
    payments  INTEGER NOT NULL CHECK (payments > 0),
    gross     INTEGER NOT NULL CHECK (gross >= 0),
    PRIMARY KEY (provider, hour, network, kind)
) STRICT;

-- What was recorded before this migration: renewals and overage charges carry their amount;
-- a first cycle (whose event did not) is its plan's price, from the plan's `plan.created`.
INSERT INTO revenue_rollups (provider, hour, network, kind, payments, gross)
    SELECT provider, hour, network, kind, COUNT(*),
           MIN(SUM(MIN(amount, 9.2e18)), 9.2e18)
    FROM (
        SELECT e.provider, e.created_at - e.created_at % 3600 AS hour,
               json_extract(e.data, '$.network') AS network,
               CASE e.type WHEN 'subscription.renewed' THEN 'renewal' ELSE 'overage' END AS kind,
               CAST(json_extract(e.data, '$.amount') AS REAL) AS amount
        FROM events e
        WHERE e.type IN ('subscription.renewed', 'allowance.charged') AND json_valid(e.data)
        UNION ALL
        SELECT e.provider, e.created_at - e.created_at % 3600 AS hour,
               json_extract(e.data, '$.network') AS network, 'first_cycle' AS kind,
               CAST(json_extract(p.data, '$.amount') AS REAL) AS amount
        FROM events e JOIN events p
            ON p.provider = e.provider AND p.type = 'plan.created' AND json_valid(p.data)
            AND json_extract(p.data, '$.network') = json_extract(e.data, '$.network')
            AND json_extract(p.data, '$.planId') = json_extract(e.data, '$.planId')
        WHERE e.type = 'subscription.created' AND json_valid(e.data)
    )
    WHERE network IS NOT NULL AND amount IS NOT NULL AND amount >= 0
    GROUP BY provider, hour, network, kind;
