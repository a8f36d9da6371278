import type { GateMethods, GateOptions } from './index'

export type { GateOptions, TollgateContext } from './index'

/** Hono middleware (`app.use('/api/*', gate)`) with the gate's methods. */
export type HonoPaymentGate = ((c: any, next: () => Promise<void>) => Promise<Response | void>) &
  GateMethods

/** The spec's `paymentGate` as Hono middleware. */
export declare function paymentGate(options: GateOptions): HonoPaymentGate
