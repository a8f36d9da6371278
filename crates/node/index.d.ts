// Types of the `tollgate` package. The native addon's generated types are in
// native/binding.d.ts; these are the spec's shapes the JavaScript half gives them.

/** An amount: tokens with a decimal point ('0.50', 6 decimals) or smallest units ('units:500000'). */
export type Amount = string

/** One way to pay for a route: the spec's pricing entries. */
export type Pricing =
  | { type: 'one-time'; amount: Amount }
  | { type: 'subscription'; plan: string }

/** The spec's `{ pricing }` and the gate's settings, in one object. */
export interface GateOptions {
  pricing: Pricing[]
  /** The facilitator's base URL (its discovery gives the network's token and chain). */
  facilitator: string
  /** Who gets paid (0x…). */
  payTo: string
  /** Default: the facilitator's only network. */
  network?: string
  /** Default: the token the facilitator publishes for the network. */
  token?: string
  tokenName?: string
  tokenVersion?: string
  /** The provider's API key (tg_…): needed to meter subscriptions. */
  apiKey?: string
  /** Deducted from a subscriber's overage allowance per request served on a subscription. */
  metered?: Amount
  description?: string
  mimeType?: string
  /** The public base URL the 402's `resource` is built on; default: the request's Host. */
  publicUrl?: string
  /** 32 bytes, 0x hex; replicas must share one. Default: random per process. */
  memoSecret?: string
  /** 'memory:' (default: this process's memory), 'sqlite::memory:' or 'sqlite://path'. */
  memoStore?: string
  memoTtlSecs?: number
  rpcUrl?: string
  /** Browsers get the 402 as a page that pays with their wallet (default true). */
  paywall?: boolean
  /** Honour x402 V2's payment-identifier (default true); false serves each payment at most once. */
  paymentIdentifier?: boolean
  /**
   * Also offer MPP (the Payment HTTP authentication scheme's EVM `charge`, default false): every
   * 402 carries a `WWW-Authenticate: Payment` challenge on the one-time price, and a request with
   * `Authorization: Payment <credential>` is settled once and answered with `Payment-Receipt`.
   */
  mpp?: boolean
}

/** A payment proof's fields (`parsePaymentProof`). */
export interface PaymentProof {
  version: number
  network: string
  chainId: number
  token: string
  payer: string
  payTo: string
  amount: string
  fee: string
  memo: string
  txHash: string
  block: number
  issuedAt: number
  expiry: number
  signer: string
  signature: string
}

/** One entry of a 402's `accepts`: x402 V1 fields and the spec's. */
export interface PaymentOption {
  scheme: string
  network: string
  token: string
  amount: string
  payTo: string
  memo: string
  asset: string
  maxAmountRequired: string
  resource: string
  description: string
  mimeType: string
  maxTimeoutSeconds: number
  extra?: { name: string; version: string }
  service?: { planId?: string; subscriptionScheme: boolean; facilitator: string }
  plan?: { planId: string; amount: string; interval: number; token: string }
}

/** The 402 body: the spec's V1 superset. */
export interface PaymentRequired {
  version: '1'
  x402Version: 1
  accepts: PaymentOption[]
  error: string
}

/** What `buildPaymentRequired` is asked for. */
export interface Terms {
  plan?: string
  amount?: Amount
  /** The absolute URL of the resource. */
  resource?: string
  method?: string
  error?: string
}

/** Usage of a subscription's overage allowance after a deduction. */
export interface AllowanceUsage {
  subscriptionId: string
  cycle: number
  cap: string
  used: string
  remaining: string
  charged: string
  unsettled: string
  unpaid: string
}

/** What a request that passed the gate carries (`req.tollgate`; Hono: `c.get('tollgate')`). */
export interface TollgateContext {
  /** The subscription it is served on (0x…), or null. */
  subscription: string | null
  /** Whether it was paid one-time (the response carries X-PAYMENT-RESPONSE). */
  paid: boolean
  /** `deductAllowance` on the request's subscription. */
  deductAllowance(amount: Amount): Promise<AllowanceUsage>
}

/** The methods of a gate (the middleware function carries them). */
export interface GateMethods {
  ready(): Promise<void>
  buildPaymentRequired(terms?: Terms): Promise<PaymentRequired>
  verifyPaymentProof(
    proof: string,
    expected: { method?: string; resource: string; price?: Amount },
  ): Promise<boolean>
  deductAllowance(subscriptionId: string, amount: Amount): Promise<AllowanceUsage>
}

/** Express middleware (`app.use('/api', gate)`) with the gate's methods. */
export type ExpressPaymentGate = ((req: any, res: any, next: (err?: unknown) => void) => Promise<void>) &
  GateMethods

/** The spec's `paymentGate` as Express middleware. */
export declare function paymentGate(options: GateOptions): ExpressPaymentGate

/** The spec's `parsePaymentProof`. Throws `InvalidPaymentProof`. */
export declare function parsePaymentProof(header: string): PaymentProof

/** What a proof must show; `facilitator` or `signers` is the trust anchor. */
export interface ProofExpectations {
  facilitator?: string
  signers?: string[]
  network?: string
  token?: string
  payTo?: string
  amount?: Amount
  memo?: string
}

/** The spec's `verifyPaymentProof`, stateless (a gate's own also spends the proof). */
export declare function verifyPaymentProof(
  proof: string | PaymentProof,
  expected?: ProofExpectations,
): Promise<boolean>

/** The spec's `buildPaymentRequired` without a mounted gate. */
export declare function buildPaymentRequired(
  options: Omit<GateOptions, 'pricing'> & { pricing?: Pricing[] } & Terms,
): Promise<PaymentRequired>

/** The spec's `deductAllowance`, through the facilitator with the provider's API key. */
export declare function deductAllowance(
  subscriptionId: string,
  amount: Amount,
  options: { facilitator: string; apiKey: string; network?: string; idempotencyKey?: string },
): Promise<AllowanceUsage>

/** The agent's spending limits. */
export interface SpendPolicy {
  maxPerRequest: Amount
  budget: Amount
  networks?: string[]
  tokens?: string[]
  payees?: string[]
  /**
   * Subscriptions are bounded by `budget` and a cap per cycle, never by `maxPerRequest`.
   * Absent or `true` (the default): the agent prefers to subscribe, as the spec asks, when a 402
   * says `subscriptionScheme: true` and offers a plan of at most `budget` a cycle (no overage
   * allowance). An object sets the cap per cycle (default `budget`) and the overage allowance the
   * agent subscribes with (default none). `false`: `pay` pays one-time only; `subscribe` still
   * subscribes when asked, within `budget` a cycle.
   */
  subscriptions?: boolean | { maxPerCycle?: Amount; maxOverage?: Amount }
}

export interface AgentOptions {
  key?: string
  keyFile?: string
  policy: SpendPolicy
  facilitators?: string[]
  stateFile?: string
}

/** What bought a response. Amounts in smallest units. */
export interface Payment {
  /** 'mpp': an MPP (`Authorization: Payment`) credential answering an MPP-only 402's EVM charge. */
  kind: 'tollgate' | 'x402' | 'subscription' | 'mpp' | 'other'
  subscriptionId: string | null
  amount: string
  fee: string | null
  network: string
  token: string
  payer: string
  payTo: string
  memo: string | null
  txHash: string | null
  /** 1 (a Tollgate proof or x402 V1), 2 (x402 V2), null (a subscription or MPP). */
  x402Version: 1 | 2 | null
  /** The payment header's value as sent (the subscription id for a subscription). */
  header: string
  /** 'x-payment', 'payment-signature', or 'authorization' (MPP). */
  headerName: string
  settlement: { success: boolean; transaction: string; network: string; payer?: string } | null
  /**
   * A request served on a subscription (`kind: 'subscription'`): what it took from the
   * subscription's overage allowance (a metered route's price, '0' elsewhere), in smallest units,
   * as the gate's `X-Service-Receipt` says; null for other payments or when the server did not say.
   */
  metered: string | null
  /**
   * `kind: 'mpp'`: the server's decoded `Payment-Receipt` (its `reference` is the settlement
   * transaction, also `txHash`; `challengeId` the challenge paid when the receipt names none);
   * null for other payments or when the server sent no readable receipt.
   */
  mppReceipt?: MppReceipt | null
}

/** An MPP `Payment-Receipt`, decoded. */
export interface MppReceipt {
  method: string
  reference: string
  status: 'success'
  /** RFC 3339. */
  timestamp: string
  challengeId: string | null
  chainId: number | null
  externalId: string | null
}

/** A fetch Response with what paid for it. */
export type PaidResponse = Response & { payment: Payment | null; earlierPayments: Payment[] }

/** A subscription (`agent.subscribe`). */
export interface Subscription {
  id: string
  status: string
  planId: string
  paidThrough: number
  allowanceCap: string
  allowanceRemaining: string
  txHash: string | null
}

export declare class Agent {
  constructor(options: AgentOptions)
  readonly address: string
  readonly spent: string
  /** The spec's `agent.pay()`. */
  pay(input: string | URL | Request, init?: RequestInit): Promise<PaidResponse>
  /**
   * Calls a (possibly priced) MCP tool over streamable HTTP, paying once within the policy. A
   * pending settlement is followed by the same payment with its retry token until the result;
   * still pending at the agent's settle timeout it rejects with `SettlementPending`, and a call
   * the server could not settle with `NotServed`: never a second payment.
   */
  callTool(
    url: string | URL,
    name: string,
    args?: Record<string, unknown>,
  ): Promise<{ isError: boolean; content: unknown[]; structuredContent: unknown; payment: Payment | null }>
  /** The spec's `agent.subscribe({ planId, maxOverage })`. */
  subscribe(options: {
    planId: string
    maxOverage: Amount
    facilitator?: string
    network?: string
  }): Promise<Subscription>
}

/** Errors carry the spec's names in `name` (and `code`). */
export type TollgateErrorName =
  | 'InsufficientFunds'
  | 'SubscriptionNotActive'
  | 'AllowanceExhausted'
  | 'InvalidPaymentProof'
  | 'PlanDeprecated'
  | 'PolicyViolation'
  | 'PaymentRejected'
  | 'InvalidArgument'
  | 'FacilitatorUnavailable'
  | 'RateLimited'
  | 'SettlementPending'
  | 'NotServed'
  | 'PaymentProblem'
  | 'UnknownTokenDomain'
  | 'ChallengeRefused'
  | string

/** An error thrown by the package: `name` and `code` are its {@link TollgateErrorName}. */
export interface TollgateError extends Error {
  name: TollgateErrorName
  code: TollgateErrorName
  /** `RateLimited` (the facilitator's 429): seconds until it takes the call again, when it said. */
  retryAfter?: number
  /**
   * `SettlementPending` (paid; the settlement was not confirmed within the agent's wait, the
   * payment was never made twice): the settlement transaction, when the server named it.
   */
  transaction?: string
  /**
   * `NotServed` (paid; the server could neither serve nor settle, e.g. its facilitator was
   * unreachable, and nothing shows the payment moved): its HTTP status, 503 for the MCP twin.
   */
  status?: number
  /**
   * `PaymentProblem` (an MPP server refused the credential sent, with application/problem+json;
   * never paid twice): the problem's type URI, e.g.
   * `https://paymentauth.org/problems/verification-failed`.
   */
  problemType?: string
}
