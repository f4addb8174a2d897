// Reading fields of what corrald sent without trusting their types: a malformed or hostile
// message yields defaults here, never an exception (String() or Number() of an object can throw:
// {"toString": 1} is valid JSON).

export type Obj = Record<string, any>;

// A JSON object (not null, not an array).
export function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// A string as is; a number or boolean as text; anything else `fallback`.
export function str(value: unknown, fallback = ""): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return fallback;
}

// A finite number, or a string holding one; anything else `fallback`.
export function num(value: unknown, fallback = 0): number {
  const n = typeof value === "number" ? value : typeof value === "string" && value.trim() !== "" ? Number(value) : NaN;
  return Number.isFinite(n) ? n : fallback;
}

// A sequence number: a positive safe integer, else 0 (none).
export function seqOf(value: unknown): number {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0 ? value : 0;
}

// The objects of an array (other entries dropped); [] for anything else.
export function objects(value: unknown): Obj[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}
