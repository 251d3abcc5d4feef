// Sign-in: an API token (``medic tokens create``) exchanged for a session cookie.

import { ApiError, post } from "../api.js";
import { html, text } from "../util.js";

export function signIn(main, { message, onSignedIn }) {
  main.innerHTML = text(html`
    <section class="signin" aria-labelledby="signin-title">
      <h1 id="signin-title" tabindex="-1">Sign in to medic</h1>
      <p>Paste an API token. An administrator creates one with
        <code>medic tokens create --role admin --name NAME</code>; it is shown once.</p>
      <p id="signin-message" class="notice" role="alert">${message || ""}</p>
      <form id="signin-form" novalidate>
        <label for="token">API token</label>
        <input id="token" name="token" type="password" autocomplete="off" spellcheck="false"
               required aria-describedby="signin-message">
        <button type="submit" id="signin-submit">Sign in</button>
      </form>
    </section>`);
  const form = main.querySelector("#signin-form");
  const input = main.querySelector("#token");
  const note = main.querySelector("#signin-message");
  if (!message) note.hidden = true;
  input.focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) {
      note.hidden = false;
      note.textContent = "Enter a token.";
      input.focus();
      return;
    }
    const button = main.querySelector("#signin-submit");
    button.disabled = true;
    try {
      const session = await post("session", { token }, { quiet401: true });
      input.value = "";
      onSignedIn(session);
    } catch (error) {
      note.hidden = false;
      note.textContent =
        error instanceof ApiError && (error.status === 401 || error.status === 403)
          ? `Sign-in refused: ${error.message}`
          : `Sign-in failed: ${error.message}`;
      input.select();
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
}
