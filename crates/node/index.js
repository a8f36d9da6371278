'use strict'
// Tollgate for Node.js: the spec's SDK calls over the Rust core (a native addon, native/).
//
//   paymentGate({ pricing, facilitator, payTo, network? })   Express middleware (Hono: ./hono)
//   parsePaymentProof(header)                                 the proof in an X-PAYMENT value
//   verifyPaymentProof(proof, expected?)                      a proof's signer and terms
//   buildPaymentRequired(...)                                 a 402 body (on a gate)
//   deductAllowance(subscriptionId, amount, options)          metered usage
//   new Agent({ key | keyFile, policy }).pay(url | Request)   the whole one-time sequence
//   agent.subscribe({ planId, maxOverage })                   a subscription with its id

const binding = require('./native/binding.js')
const { named, wrap } = require('./errors.js')

/** The spec's `parsePaymentProof`: the fields of the proof in an `X-PAYMENT` value. */
const parsePaymentProof = wrap(binding.parsePaymentProof)

/**
 * The spec's `verifyPaymentProof`, stateless: whether `proof` (an `X-PAYMENT` value or a parsed
 * proof) is unexpired, signed by a signer of `expected.facilitator` (or one of
 * `expected.signers`) and matches `expected`'s network, token, payTo, amount and memo.
 */
const verifyPaymentProof = wrap(binding.verifyPaymentProof)

/** The request's headers, a header sent several times as an array. */
function headersOf(req) {
  const raw = req.rawHeaders
  if (!Array.isArray(raw)) return req.headers ?? {}
  const out = {}
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    const value = raw[i + 1]
    if (name in out) {
      out[name] = Array.isArray(out[name]) ? [...out[name], value] : [out[name], value]
    } else {
      out[name] = value
    }
  }
  return out
}

/**
 * The answer when the gate cannot decide (it could not reach the facilitator to learn the
 * network, token or plans): 503 with Retry-After, as the Rust gate answers an outage (a 402
 * would invite paying again); `null` for any other error.
 */
function unavailable(err) {
  if (err && err.name === 'FacilitatorUnavailable') {
    return {
      status: 503,
      headers: { 'content-type': 'application/json', 'retry-after': '5' },
      body: JSON.stringify({ error: { code: 'FacilitatorUnavailable', message: err.message } }),
    }
  }
  return null
}

/** The methods every gate (Express or Hono) has, bound to its native gate. */
function gateMethods(gate) {
  return {
    /** Builds the gate now (reads the facilitator's discovery and the plans' terms). */
    ready: wrap(() => gate.ready()),
    /** The spec's `buildPaymentRequired`: the 402 body for `{ plan }` or `{ amount }`. */
    buildPaymentRequired: wrap((terms = {}) => gate.buildPaymentRequired(terms)),
    /** `verifyPaymentProof` at this gate: checks the proof pays for `expected` and spends it. */
    verifyPaymentProof: wrap((proof, expected) => gate.verifyPaymentProof(proof, expected)),
    /** The spec's `deductAllowance` with this gate's API key. */
    deductAllowance: wrap((subscriptionId, amount) => gate.deductAllowance(subscriptionId, amount)),
  }
}

/** What a request that passed the gate carries (`req.tollgate`, Hono: `c.get('tollgate')`). */
function context(gate, decision) {
  const subscription = decision.subscription ?? null
  return {
    subscription,
    paid: Object.prototype.hasOwnProperty.call(decision.headers, 'x-payment-response'),
    deductAllowance: wrap((amount) => {
      if (!subscription) throw named(new Error('NotASubscriber: this request was not served on a subscription'))
      return gate.deductAllowance(subscription, amount)
    }),
  }
}

/**
 * The spec's `paymentGate` as Express middleware: `app.use('/api', paymentGate({ pricing: [...],
 * facilitator, payTo }))`. A request that does not pay gets the 402 (or 503) and never reaches
 * the next handler; one that pays goes on with `req.tollgate` and the settlement headers set.
 */
function paymentGate(options) {
  const gate = new binding.NativeGate(options)
  async function middleware(req, res, next) {
    let decision
    try {
      decision = await gate.admit({
        method: req.method,
        url: req.originalUrl ?? req.url,
        headers: headersOf(req),
      })
    } catch (e) {
      decision = unavailable(named(e))
      if (!decision) return next(e)
    }
    if (!decision.admitted) {
      res.statusCode = decision.status
      for (const [k, v] of Object.entries(decision.headers)) res.setHeader(k, v)
      res.end(decision.body ?? '')
      return undefined
    }
    for (const [k, v] of Object.entries(decision.headers)) res.setHeader(k, v)
    req.tollgate = context(gate, decision)
    return next()
  }
  return Object.assign(middleware, gateMethods(gate), { native: gate })
}

/**
 * The spec's `buildPaymentRequired` without a mounted gate: `options` are a gate's settings
 * (`facilitator`, `payTo`, `pricing` or `plan`/`amount`, …). Resolves to the 402 body.
 */
const buildPaymentRequired = wrap(async (options) => {
  const { plan, amount, resource, method, error, ...settings } = options
  // The terms' plan and price are the gate's pricing: so a plan's terms are loaded and spelled out.
  const pricing = settings.pricing ?? [
    ...(plan ? [{ type: 'subscription', plan }] : []),
    ...(amount ? [{ type: 'one-time', amount }] : []),
  ]
  const gate = new binding.NativeGate({ ...settings, pricing })
  return gate.buildPaymentRequired({ plan, amount, resource, method, error })
})

/**
 * The spec's `deductAllowance`: deducts `amount` (tokens, "0.10", or "units:N") from the
 * subscription's overage allowance for its current cycle, through `options.facilitator` with
 * the provider's `options.apiKey`. Rejects with `AllowanceExhausted` past the cap (nothing
 * deducted) and `SubscriptionNotActive` for a paused, cancelled or overdue subscription.
 */
const deductAllowance = wrap((subscriptionId, amount, options) => {
  if (!options || !options.facilitator || !options.apiKey) {
    throw named(new Error('InvalidArgument: deductAllowance needs { facilitator, apiKey } (or use the gate\'s own: gate.deductAllowance)'))
  }
  return binding.deductAllowance(subscriptionId, amount, options)
})

const NULL_BODY = new Set([101, 204, 205, 304])

/**
 * An agent that pays within its policy: `new Agent({ key | keyFile, policy: { maxPerRequest,
 * budget } })` (amounts as tokens, '0.50').
 */
class Agent {
  #native

  constructor(options) {
    try {
      this.#native = new binding.NativeAgent(options)
    } catch (e) {
      throw named(e)
    }
  }

  /** The agent's address. */
  get address() {
    return this.#native.address
  }

  /** What it has spent so far, in tokens ('0.500000'). */
  get spent() {
    return this.#native.spent
  }

  /**
   * The spec's `agent.pay()`: fetches `input` (a URL or a `Request`), paying if the server
   * answers 402, and resolves to the final fetch `Response`, with `response.payment` (what
   * bought it, or null) and `response.earlierPayments`.
   */
  async pay(input, init) {
    const request = input instanceof Request ? input : new Request(input, init)
    const headers = {}
    request.headers.forEach((value, name) => {
      headers[name] = value
    })
    const body = request.body ? Buffer.from(await request.arrayBuffer()).toString('base64') : undefined
    let paid
    try {
      paid = await this.#native.pay({ url: request.url, method: request.method, headers, body })
    } catch (e) {
      throw named(e)
    }
    const bytes = Buffer.from(paid.body, 'base64')
    const response = new Response(NULL_BODY.has(paid.status) ? null : bytes, {
      status: paid.status,
      headers: paid.headers.map(([k, v]) => [k, v]),
    })
    Object.defineProperties(response, {
      payment: { value: paid.payment ?? null, enumerable: true },
      earlierPayments: { value: paid.earlierPayments, enumerable: true },
    })
    return response
  }

  /**
   * Calls the MCP tool `name` at the streamable-HTTP endpoint `url` with `args`, paying once
   * within the policy if it is priced (x402's MCP transport). Resolves to `{ isError, content,
   * structuredContent, payment }`.
   */
  async callTool(url, name, args = {}) {
    try {
      return await this.#native.callTool(String(url), name, args)
    } catch (e) {
      throw named(e)
    }
  }

  /** The spec's `agent.subscribe({ planId, maxOverage })`: the subscription, with its `id`. */
  async subscribe(options) {
    try {
      return await this.#native.subscribe(options)
    } catch (e) {
      throw named(e)
    }
  }
}

module.exports = {
  Agent,
  paymentGate,
  parsePaymentProof,
  verifyPaymentProof,
  buildPaymentRequired,
  deductAllowance,
  headersOf,
  gateMethods,
  context,
  unavailable,
}
