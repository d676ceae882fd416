// Copying text to the clipboard, with the "Copied" feedback on the button that asked.
//
// navigator.clipboard needs a secure context (https, or localhost); elsewhere, or when
// the browser refuses, a hidden textarea and execCommand("copy") do it.

/** Puts `text` on the clipboard; resolves true when it got there. */
export async function copyText(text) {
  if (navigator.clipboard?.writeText && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // refused (no permission, page not focused): try the old way
    }
  }
  return legacyCopy(text);
}

function legacyCopy(text) {
  const focused = document.activeElement;
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.cssText = "position:fixed;top:0;left:0;opacity:0;pointer-events:none";
  document.body.append(area);
  area.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch {
    copied = false;
  }
  area.remove();
  focused?.focus?.();
  return copied;
}

const SHOWN_MS = 1500;

/** Copies `text` and says so on `button` for a moment ("Copied", or "Copy failed"). */
export async function copyFrom(button, text) {
  const copied = await copyText(text);
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  button.textContent = copied ? "Copied" : "Copy failed";
  button.classList.toggle("copied", copied);
  clearTimeout(Number(button.dataset.timer));
  button.dataset.timer = String(
    setTimeout(() => {
      button.textContent = label;
      button.classList.remove("copied");
    }, SHOWN_MS),
  );
  return copied;
}
