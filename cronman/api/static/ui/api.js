// Calls to the cronman API from the browser, with the operator's token.
// The token is kept in this browser's localStorage (the key the API docs
// page reads too) and sent as "Authorization: Bearer <token>".

const TOKEN_KEY = "cronman.token";

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "error";
    this.field = err.field || null;
  }
}

export function getToken() {
  return window.localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) window.localStorage.setItem(TOKEN_KEY, token);
  else window.localStorage.removeItem(TOKEN_KEY);
}

/** Build "v1/runs?status=failed&..." leaving out empty values; arrays repeat. */
export function url(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value === null || value === undefined || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) query.append(key, one);
  }
  const qs = query.toString();
  return qs ? `${path}?${qs}` : path;
}

/** JSON from the API; throws ApiError on an error answer. */
export async function api(path, { method = "GET", params, body, signal } = {}) {
  const headers = { Accept: "application/json" };
  const token = getToken();
  if (token) headers.Authorization = "Bearer " + token;
  const init = { method, headers, cache: "no-store", signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(url(path, params), init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = { error: { message: text } }; }
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}
