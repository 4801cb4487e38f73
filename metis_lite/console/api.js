/* The service's JSON API, as the page calls it: its errors, its token, and its absence.
 *
 * A 401 opens the token prompt once for every request waiting on it; the token is kept in
 * sessionStorage only (gone when the tab closes), sent as `Authorization: Bearer <token>`.
 * A fetch that fails (nothing listening, network down) shows the banner saying so.
 */

import { $ } from "./dom.js";

const TOKEN_KEY = "metis-lite.token";
const TOKEN_HINT = "Paste the access token you were given. It is kept in this browser tab only.";

/** The service refused a request: its HTTP status and the error's public code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The service could not be reached at all. */
export class Unreachable extends Error {}

let tokenWait = null; // one prompt for every request that met a 401 meanwhile

/** GET (no body) or POST JSON; on 401 asks for a token and tries again with it. */
export async function api(path, body) {
  const response = await send(path, body, "application/json");
  try {
    return await response.json();
  } catch (error) {
    return null; // an answer with no JSON body
  }
}

/** A document's file as the service serves it (GET), with the token when there is one. */
export async function file(path) {
  const response = await send(path, undefined, "*/*");
  return response.blob();
}

/** Whether requests carry a token: a plain link cannot, so a file is then fetched and opened. */
export function hasToken() {
  return Boolean(sessionStorage.getItem(TOKEN_KEY));
}

async function send(path, body, accept) {
  for (;;) {
    const headers = { Accept: accept };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, {
        method: body === undefined ? "GET" : "POST",
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (error) {
      $("service-message").textContent = unreachableText();
      $("service").hidden = false;
      throw new Unreachable("No answer: the service could not be reached.");
    }
    $("service").hidden = true;
    if (response.ok) return response;
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      data = null;
    }
    if (response.status === 401) {
      const message = (data && data.error && data.error.message) || "this service needs a token";
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      await askToken(token ? `That token was refused (${message}). Paste another one.` : TOKEN_HINT);
      continue;
    }
    const error = (data && data.error) || {
      code: `HTTP_${response.status}`,
      message: `the service answered ${response.status} ${response.statusText}`.trim(),
    };
    throw new ApiError(response.status, error.code, error.message);
  }
}

function unreachableText() {
  return (
    `The search service at ${location.origin} cannot be reached. ` +
    "Check that metis-lite serve is running there, then try again."
  );
}

function askToken(message) {
  if (!tokenWait) {
    tokenWait = new Promise((resolve, reject) => {
      const dialog = $("token-dialog");
      $("token-message").textContent = message;
      $("token").value = "";
      dialog.onsubmit = (event) => {
        event.preventDefault();
        const value = $("token").value.trim();
        if (!value) return;
        sessionStorage.setItem(TOKEN_KEY, value);
        tokenWait = null;
        dialog.oncancel = null;
        dialog.close();
        resolve();
      };
      dialog.oncancel = () => {
        tokenWait = null;
        reject(new ApiError(401, "UNAUTHORIZED", "this service needs a token, and none was given"));
      };
      dialog.showModal();
      $("token").focus();
    });
  }
  return tokenWait;
}
