// The sign-in form: email and password in, a session (api.js `auth`) out, refusals shown in the form.
//
// The password field is emptied once it has been sent, whatever the answer; the email stays for a retry.

import { auth } from "./api.js";

const $ = (id) => document.getElementById(id);

/** What the form says for a refused sign-in. */
function refusal(err) {
  if (err.status === 401) return "That email and password were not accepted.";
  if (err.status === 429) return `Too many failed sign-ins. Try again in ${Math.ceil(err.retryAfter ?? 60)} seconds.`;
  return err.message || "Signing in failed.";
}

/** Shows the form instead of the app; `message` says why (a session that ended, a sign-out). */
export function showSignIn(message = "") {
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("password").value = "";
  ($("email").value ? $("password") : $("email")).focus();
}

export function hideSignIn() {
  $("signin").hidden = true;
  $("app").hidden = false;
}

/** Wires the form: `signedIn(session)` runs once the server has opened a session. */
export function setUpSignIn(signedIn) {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const email = $("email").value.trim();
    const password = $("password").value;
    if (!email || !password) return;
    const button = $("signin-submit");
    button.disabled = true;
    $("signin-error").textContent = "";
    try {
      const session = await auth.signIn(email, password);
      $("password").value = "";
      signedIn(session);
    } catch (err) {
      $("password").value = "";
      $("signin-error").textContent = refusal(err);
      $("password").focus();
    } finally {
      button.disabled = false;
    }
  });
}
