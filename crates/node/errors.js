'use strict'
// Errors from the native addon arrive as `Error`s whose message is "<Name>: <message>"; this
// turns them into `error.name === "<Name>"` (the spec's error names: InsufficientFunds,
// SubscriptionNotActive, AllowanceExhausted, InvalidPaymentProof, PlanDeprecated, ...), with
// `error.code` the same name and `error.message` the rest; a `RateLimited` one also gets
// `error.retryAfter` (seconds), when the facilitator said; a `SettlementPending` one (paid, the
// settlement not confirmed within the agent's wait: never pay again) `error.transaction`, when
// the server named it; a `NotServed` one (paid, not served, nothing shows the payment moved)
// `error.status`, the server's HTTP status or its MCP twin; a `PaymentProblem` one (an MPP
// server refused the credential with application/problem+json) `error.problemType`, the
// problem's type URI.

const NAMED = /^([A-Z][A-Za-z0-9]+): ([\s\S]*)$/
// A `RateLimited` message ends with the facilitator's `Retry-After`, when it gave one.
const RETRY_AFTER = /\(retry after (\d+) s\)$/
// A `SettlementPending` message names the transaction, when the server did.
const TRANSACTION = /\(transaction (0x[0-9a-fA-F]{64})\)/
// A `NotServed` message names the server's status.
const STATUS = /^the server answered (\d{3}) /
// A `PaymentProblem` message names the problem's type URI.
const PROBLEM = /^the server refused the MPP credential \((\S+)\): /

/** Renames a native error in place (and returns it); other values pass through. */
function named(err) {
  if (err instanceof Error && err.code === 'GenericFailure') {
    const m = NAMED.exec(err.message)
    if (m) {
      err.name = m[1]
      err.code = m[1]
      err.message = m[2]
      const wait = m[1] === 'RateLimited' && RETRY_AFTER.exec(m[2])
      if (wait) err.retryAfter = Number(wait[1])
      const tx = m[1] === 'SettlementPending' && TRANSACTION.exec(m[2])
      if (tx) err.transaction = tx[1]
      const status = m[1] === 'NotServed' && STATUS.exec(m[2])
      if (status) err.status = Number(status[1])
      const problem = m[1] === 'PaymentProblem' && PROBLEM.exec(m[2])
      if (problem) err.problemType = problem[1]
    }
  }
  return err
}

/** Calls `fn`, renaming whatever it throws or rejects with. */
function wrap(fn) {
  return function wrapped(...args) {
    try {
      const out = fn.apply(this, args)
      return out && typeof out.then === 'function' ? out.catch((e) => { throw named(e) }) : out
    } catch (e) {
      throw named(e)
    }
  }
}

module.exports = { named, wrap }
