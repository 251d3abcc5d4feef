// The console's only way to the medic API: JSON over fetch, the session cookie, the CSRF header on
// every write, problem+json errors turned into messages.

export const API = "/api/v1";

const session = { principal: null, csrf: null };
const listeners = { unauthorized: [] };

export class ApiError extends Error {
  constructor(status, problem, fallback) {
    const detail = problem && (problem.detail || problem.title);
    super(detail || fallback || `HTTP ${status}`);
    this.status = status;
    this.code = (problem && problem.code) || null;
  }
}

export function principal() {
  return session.principal;
}

export function csrfToken() {
  return session.csrf;
}

export function setSession(value) {
  session.principal = value ? { name: value.name, role: value.role } : null;
  if (value && value.csrf_token) session.csrf = value.csrf_token;
  if (!value) session.csrf = null;
}

export function onUnauthorized(fn) {
  listeners.unauthorized.push(fn);
}

export function unauthorized() {
  for (const fn of listeners.unauthorized) fn();
}

async function problemOf(response) {
  const type = response.headers.get("content-type") || "";
  if (type.includes("json")) {
    try {
      return await response.json();
    } catch {
      return null;
    }
  }
  return null;
}

// One request. ``path`` is under /api/v1 unless it starts with "/". Writes carry the CSRF token.
export async function request(method, path, { body, query, raw, quiet401 } = {}) {
  let url = path.startsWith("/") ? path : `${API}/${path}`;
  if (query) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value === undefined || value === null || value === "") continue;
      for (const one of Array.isArray(value) ? value : [value]) params.append(key, String(one));
    }
    const text = params.toString();
    if (text) url += (url.includes("?") ? "&" : "?") + text;
  }
  const headers = { Accept: raw ? "*/*" : "application/json" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    if (session.csrf) headers["X-CSRF-Token"] = session.csrf;
  }
  const response = await fetch(url, {
    method,
    headers,
    credentials: "same-origin",
    cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401 && !quiet401) unauthorized();
  if (!response.ok) {
    throw new ApiError(response.status, await problemOf(response), response.statusText);
  }
  if (raw) return response.text();
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, query, options) => request("GET", path, { ...options, query });
export const post = (path, body, options) => request("POST", path, { ...options, body });
export const put = (path, body, options) => request("PUT", path, { ...options, body });
export const del = (path, options) => request("DELETE", path, options);

// Every audit event matching ``query``, following the cursor up to ``maxPages`` pages.
export async function auditEvents(query, maxPages = 5) {
  const events = [];
  let after = undefined;
  for (let page = 0; page < maxPages; page += 1) {
    const result = await get("audit", { limit: 1000, ...query, after_id: after });
    events.push(...result.events);
    if (result.next_after_id === null || result.next_after_id === undefined) break;
    after = result.next_after_id;
  }
  return events;
}
