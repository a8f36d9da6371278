'use strict'
// The spec's `paymentGate` as Hono middleware:
//   app.use('/api/*', paymentGate({ pricing: [...], facilitator, payTo }))
// Same settings and decisions as the Express one (the Rust gate decides); a request that pays
// goes on with c.get('tollgate') and the settlement headers on its response.

const binding = require('./native/binding.js')
const { named } = require('./errors.js')
const { gateMethods, context, unavailable } = require('./index.js')

function paymentGate(options) {
  const gate = new binding.NativeGate(options)
  async function middleware(c, next) {
    const headers = {}
    c.req.raw.headers.forEach((value, name) => {
      headers[name] = value
    })
    let decision
    try {
      decision = await gate.admit({ method: c.req.method, url: c.req.url, headers })
    } catch (e) {
      decision = unavailable(named(e))
      if (!decision) throw e
    }
    if (!decision.admitted) {
      return new Response(decision.body ?? '', { status: decision.status, headers: decision.headers })
    }
    c.set('tollgate', context(gate, decision))
    await next()
    for (const [k, v] of Object.entries(decision.headers)) c.res.headers.set(k, v)
    return undefined
  }
  return Object.assign(middleware, gateMethods(gate), { native: gate })
}

module.exports = { paymentGate }
