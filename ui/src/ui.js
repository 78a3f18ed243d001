// Shared pieces: the router (every page its own URL under /ui/), the signed-in user, formats.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);
export const BASE = '/ui';

export function navigate(path, replace = false) {
  const url = `${BASE}${path}`;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  window.dispatchEvent(new Event('h3pipe:navigate'));
}

// The path below /ui (e.g. "/runs/r-1"), following pushState and the back button.
export function useRoute() {
  const read = () => {
    const p = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : '/';
    return { path: p || '/', query: new URLSearchParams(location.search) };
  };
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    window.addEventListener('popstate', on);
    window.addEventListener('h3pipe:navigate', on);
    return () => {
      window.removeEventListener('popstate', on);
      window.removeEventListener('h3pipe:navigate', on);
    };
  }, []);
  return route;
}

// An in-app link: a real <a href> (open in a new tab works), handled without a reload.
export function Link({ to, children, ...rest }) {
  const onClick = (e) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return html`<a href=${`${BASE}${to}`} onClick=${onClick} ...${rest}>${children}</a>`;
}

export function usePoll(fn, ms, deps = []) {
  useEffect(() => {
    let live = true;
    let timer;
    const tick = async () => {
      try {
        await fn();
      } finally {
        if (live) timer = setTimeout(tick, ms);
      }
    };
    tick();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, deps);
}

export const canAct = (me, need = 'submit') => {
  const rank = { read: 0, submit: 1, admin: 2 };
  return me && rank[me.role] >= rank[need];
};

export function ago(ms) {
  if (!ms) return '';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
}

export function secs(s) {
  if (s === undefined || s === null || Number.isNaN(s)) return '';
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function Bar({ value, label }) {
  const v = Math.max(0, Math.min(100, value || 0));
  return html`<div class="bar" role="progressbar" aria-label=${label} aria-valuemin="0"
    aria-valuemax="100" aria-valuenow=${Math.round(v)}><span style=${`width:${v}%`}></span></div>`;
}

export function StateBadge({ state }) {
  return html`<span class=${`badge s-${state}`}>${state}</span>`;
}

export function ErrorLine({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${String(error.message || error)}</p>`;
}

// Terminal job states and the job states in pipeline order.
export const STAGES = ['queued', 'encode', 'sample', 'transfer', 'decode', 'done'];
export const TERMINAL = ['done', 'failed', 'cancelled'];
