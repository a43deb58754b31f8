// A line's live event stream (GET /ws, a websocket): it resumes after the last
// seq it saw, keeps the line's latest frames (the feed shows them when the
// line's page opens), and tells its owner of each frame and each change of
// state. One per line: the page's own line in a one-line plant; in a plant of
// several lines, one per line the user may see, up to PLANT_STREAMS_MAX (plant.js).
"use strict";

const RECONNECT_MS = 2000;        // the first retry after a stream closed, as before
const RECONNECT_MAX_MS = 30000;   // retries back off to this (a gateway down: not N sockets every 2 s)
const RECENT_FRAMES = 200;        // as many as the feed shows

class LineStream {
  /** `lineId`: the stream's line, null for the default line (no `line=`: one-line plants).
   *  `onFrame(frame, stream)` for each event; `onState(stream)` when it opens or closes. */
  constructor(lineId, { onFrame, onState = () => {} }) {
    this.lineId = lineId;
    this.onFrame = onFrame;
    this.onState = onState;
    this.lastSeq = null;
    this.socket = null;
    this.live = false;
    this.failures = 0;  // closes in a row without an open: the backoff
    this.timer = null;
    this.recent = [];   // newest last
  }

  start() {
    this.stop();
    this.connect();
    return this;
  }

  connect() {
    this.timer = null;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const query = [];
    if (this.lineId) query.push(`line=${encodeURIComponent(this.lineId)}`);
    if (this.lastSeq !== null) query.push(`after=${this.lastSeq}`);
    // A session's stream is let in by its cookie; a token rides in the URL (no headers on a websocket).
    if (token) query.push(`token=${encodeURIComponent(token)}`);
    const socket = new WebSocket(`${proto}://${location.host}/ws?${query.join("&")}`);
    this.socket = socket;
    socket.onopen = () => {
      this.live = true;
      this.failures = 0;
      this.onState(this);
    };
    socket.onmessage = (msg) => {
      const frame = JSON.parse(msg.data);
      if (frame.type === "overflow") { this.lastSeq = frame.resumeAfter; return; }
      if (typeof frame.seq === "number") this.lastSeq = frame.seq;
      this.recent.push(frame);
      if (this.recent.length > RECENT_FRAMES) this.recent.shift();
      this.onFrame(frame, this);
    };
    socket.onclose = (ev) => {
      this.socket = null;
      this.live = false;
      this.onState(this);
      if (ev.code === 4401 && !token) { sessionEnded(); return; }  // signed out, disabled, new password
      // Resume from lastSeq; a little jitter, so the panels of a plant do not come back all at once.
      const delay = Math.min(RECONNECT_MAX_MS, RECONNECT_MS * 2 ** this.failures++) + Math.random() * 500;
      this.timer = setTimeout(() => this.connect(), delay);
    };
  }

  /** What the indicator says of it: "on" (open), "connecting" (its first open
   *  still to come), "off" (it closed: reconnecting). */
  get state() {
    if (this.live) return "on";
    return this.failures === 0 ? "connecting" : "off";
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.socket) {
      this.socket.onclose = null;
      this.socket.close();
      this.socket = null;
    }
    this.live = false;
  }
}
