// htmx extension "medic": lets htmx talk to the JSON API.
//
// * polling regions: ``hx-get="/api/v1/..." hx-trigger="load, every 2s" data-render="NAME"`` —
//   the JSON answer goes through the renderer registered under NAME and the HTML it returns is
//   swapped in;
// * buttons: ``hx-post`` / ``hx-put`` send their parameters (``hx-vals``, ``hx-include``) as a JSON
//   body with the ``X-CSRF-Token`` header; ``data-done="..."`` is said in the status region after
//   a success;
// * a region whose form control has the focus is not redrawn under the user's hands, and focus
//   stays on the button with the same id after a redraw;
// * 401 hands over to the sign-in page; any other error is said with the API's problem detail.

import { csrfToken, unauthorized } from "./api.js";
import { busy, esc, liveFailed, liveOk, say, text } from "./util.js";

const renderers = new Map();

export function registerRenderer(name, fn) {
  renderers.set(name, fn);
}

function rendererFor(elt) {
  const host = elt.closest("[data-render]");
  return host ? renderers.get(host.dataset.render) : undefined;
}

function problemDetail(xhr) {
  try {
    const problem = JSON.parse(xhr.responseText);
    return problem.detail || problem.title || `HTTP ${xhr.status}`;
  } catch {
    return `HTTP ${xhr.status} ${xhr.statusText}`;
  }
}

let focusedId = null;

const htmx = window.htmx;

htmx.defineExtension("medic", {
  onEvent(name, evt) {
    const detail = evt.detail;
    if (name === "htmx:configRequest") {
      detail.headers.Accept = "application/json";
      if (detail.verb !== "get") {
        detail.headers["Content-Type"] = "application/json";
        const token = csrfToken();
        if (token) detail.headers["X-CSRF-Token"] = token;
      }
    } else if (name === "htmx:beforeSwap") {
      // Still attached here (an outerHTML swap may remove the element that asked).
      const target = detail.target;
      const verb = detail.requestConfig && detail.requestConfig.verb;
      if (verb === "get" && target && busy(target)) detail.shouldSwap = false;
      const active = document.activeElement;
      focusedId = active && target && target.contains(active) ? active.id || null : null;
      const elt = detail.requestConfig && detail.requestConfig.elt;
      if (verb !== "get" && detail.xhr.status < 300 && elt && elt.dataset) {
        if (elt.dataset.done) say(elt.dataset.done);
        if (elt.dataset.refresh) {
          const selector = elt.dataset.refresh;
          setTimeout(() => {
            for (const region of document.querySelectorAll(selector)) htmx.trigger(region, "refresh");
          }, 0);
        }
      }
    } else if (name === "htmx:afterSwap") {
      if (focusedId) {
        const again = document.getElementById(focusedId);
        if (again && document.activeElement !== again) again.focus();
        focusedId = null;
      }
    } else if (name === "htmx:afterRequest") {
      const xhr = detail.xhr;
      if (detail.successful) {
        liveOk();
      } else if (xhr && xhr.status === 401) {
        unauthorized();
      } else if (xhr && xhr.status) {
        const message = problemDetail(xhr);
        if (detail.requestConfig.verb === "get") liveFailed(new Error(message));
        else say(`Not done: ${message}`, "error");
      }
    } else if (name === "htmx:sendError") {
      liveFailed(new Error("the medic API does not answer"));
    }
    return true;
  },

  encodeParameters(xhr, parameters) {
    xhr.overrideMimeType("text/json");
    const body = {};
    parameters.forEach((value, key) => {
      if (value === "") return;
      if (Object.hasOwn(body, key)) {
        body[key] = [].concat(body[key], value);
      } else {
        body[key] = value;
      }
    });
    return JSON.stringify(body);
  },

  transformResponse(textBody, xhr, elt) {
    const render = rendererFor(elt);
    if (!render) return esc(textBody);
    let data;
    try {
      data = JSON.parse(textBody);
    } catch {
      return esc(textBody);
    }
    return text(render(data, elt));
  },
});
