// Type-checked by the test suite (tsc --noEmit): the package's types, as a TypeScript user sees
// them.
import express from 'express'
import { Agent, paymentGate, parsePaymentProof, verifyPaymentProof, type PaidResponse } from 'tollgate'
import { paymentGate as honoGate } from 'tollgate/hono'

const gate = paymentGate({
  pricing: [
    { type: 'one-time', amount: '0.50' },
    { type: 'subscription', plan: '0x' + '11'.repeat(32) },
  ],
  facilitator: 'http://127.0.0.1:8402',
  payTo: '0x00000000000000000000000000000000000a11ce',
  metered: '0.10',
})
const app = express()
app.use('/api', gate)
app.get('/api/quote', (_req, res) => {
  res.json({ quote: 42 })
})
void honoGate({ pricing: [{ type: 'one-time', amount: 'units:500000' }], facilitator: 'http://f', payTo: '0x1' })

async function main(): Promise<void> {
  const body = await gate.buildPaymentRequired({ amount: '0.50', resource: 'http://x/api/quote' })
  const version: '1' = body.version
  const agent = new Agent({ key: '0x' + '22'.repeat(32), policy: { maxPerRequest: '0.50', budget: '5.00' } })
  const response: PaidResponse = await agent.pay('http://127.0.0.1:3000/api/quote')
  const proof = parsePaymentProof(response.payment?.header ?? '')
  const ok: boolean = await verifyPaymentProof(proof, { facilitator: 'http://127.0.0.1:8402' })
  const sub = await agent.subscribe({ planId: proof.memo, maxOverage: '0.10' })
  console.log(version, ok, sub.id, response.payment?.x402Version)
}
void main
