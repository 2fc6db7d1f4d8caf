// The console's one way to the broker: the HTTP admin API with its own login (HTTP
// Basic). The credentials are kept in this tab's sessionStorage, so they go when the
// tab closes, and are sent by this script only: no cookie, so no other site's page
// can make the browser send them.
"use strict";

const Api = (() => {
  const KEY = "mqgate.console.login";
  let onLoggedOut = () => {};

  function header() {
    const saved = sessionStorage.getItem(KEY);
    return saved ? JSON.parse(saved).header : null;
  }

  function user() {
    const saved = sessionStorage.getItem(KEY);
    return saved ? JSON.parse(saved).user : null;
  }

  function basic(name, password) {
    // btoa takes Latin-1 only: encode the UTF-8 bytes first (RFC 7617's charset).
    const bytes = new TextEncoder().encode(`${name}:${password}`);
    let text = "";
    bytes.forEach((b) => { text += String.fromCharCode(b); });
    return "Basic " + btoa(text);
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function failure(response) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.error) message = body.error;
    } catch (e) { /* not JSON: the status line says enough */ }
    return new ApiError(response.status, message);
  }

  // path: "/api/...", options: {method, body (an object, sent as JSON)}.
  async function call(path, options = {}, auth = header()) {
    const init = {method: options.method || "GET", headers: {}, cache: "no-store",
                  credentials: "omit", signal: options.signal};
    if (auth) init.headers.Authorization = auth;
    if (options.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    const response = await fetch(path, init);
    if (response.status === 401 && auth === header()) {
      logout();
      onLoggedOut("Your login was refused; log in again.");
    }
    if (!response.ok) throw await failure(response);
    return options.raw ? response : response.json();
  }

  async function login(name, password) {
    const auth = basic(name, password);
    await call("/api/overview", {}, auth);   // throws ApiError: 401, 403, 503
    sessionStorage.setItem(KEY, JSON.stringify({user: name, header: auth}));
  }

  function logout() {
    sessionStorage.removeItem(KEY);
  }

  // A JSON-lines stream: onLine(object) per line until the response ends or
  // controller.abort(). Resolves when it ends; rejects with ApiError or a network error.
  async function stream(path, onLine, controller) {
    const response = await call(path, {raw: true, signal: controller.signal});
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      pending += decoder.decode(value, {stream: true});
      let end;
      while ((end = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, end).trim();
        pending = pending.slice(end + 1);
        if (line) onLine(JSON.parse(line));
      }
    }
  }

  // A path segment for a name (a queue "a/b" is /api/destinations/queue/a%2Fb).
  function seg(name) {
    return encodeURIComponent(name);
  }

  return {call, login, logout, stream, seg, user, ApiError,
          loggedIn: () => header() !== null,
          set onLoggedOut(f) { onLoggedOut = f; }};
})();
