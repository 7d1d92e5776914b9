/* The report's interactive views, self-contained (no library, no network; text is only
 * ever set with textContent):
 *
 *  - head view  [data-probe-head-view]: pick an example, a layer, a head; click a token
 *    to see only its lines; hide special tokens and punctuation. Lines in the style of
 *    Vaswani et al. (2017, appendix) and bertviz's head view (Vig 2019).
 *  - model view [data-probe-model-view]: every layer x head as a thumbnail heatmap of
 *    the chosen example (bertviz's model_view); a click opens the head's page.
 *
 * Data (JSON in a child <script type="application/json">, from probe.app.report):
 *   head view:  {layers, heads, initial: [li, hi], title, accent,
 *                examples: [{title, text, tokens, query_tokens|null, trivial, nq, nk,
 *                            w: base64 uint8 [layer_i][head_i][query][key]}]}
 *   model view: {layers, heads, cmap: [hex...], href: "heads/L{layer}H{head}.html",
 *                examples: [... as above]}
 * A root with data-source="ID" takes its examples from the JSON element #ID (the compare
 * page's two panes share one copy).
 * State is mirrored on the root element for tests: data-example, data-layer, data-head,
 * data-selected (token, e.g. "q2", or ""), data-lines (lines drawn), data-thumbs.
 */
(function () {
  "use strict";
  if (window.ProbeViews) { window.ProbeViews.mountAll(); return; }
  var SVGNS = "http://www.w3.org/2000/svg";
  var MIN_WEIGHT = 0.02;

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) { if (attrs.hasOwnProperty(k)) e.setAttribute(k, attrs[k]); }
    if (parent) parent.appendChild(e);
    return e;
  }

  function html(tag, text, parent) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (parent) parent.appendChild(e);
    return e;
  }

  function decode(ex) {
    if (ex._bytes) return ex._bytes;
    var s = atob(ex.w), b = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
    ex._bytes = b;
    return b;
  }

  /* weight of (layer index, head index, query, key) in an example, in [0, 1] */
  function weight(ex, nHeads, li, hi, q, k) {
    return decode(ex)[((li * nHeads + hi) * ex.nq + q) * ex.nk + k] / 255;
  }

  function select(bar, label, values, current, onChange) {
    var lab = html("label", label + " ", bar);
    var s = html("select", null, lab);
    values.forEach(function (v, i) { var o = html("option", v, s); o.value = String(i); });
    s.value = String(current);
    s.disabled = values.length < 2;
    s.setAttribute("data-role", label);
    s.addEventListener("change", function () { onChange(parseInt(s.value, 10)); });
    return s;
  }

  function mountHead(root, data) {
    var state = {ex: 0, li: 0, hi: 0, side: null, sel: null, hide: false};
    if (data.initial) { state.li = data.initial[0] || 0; state.hi = data.initial[1] || 0; }
    var bar = html("div", null, root);
    bar.className = "phv-bar";
    if (data.title) { var t = html("span", data.title, bar); t.className = "phv-title"; }
    var exTitles = data.examples.map(function (e, i) { return e.title || ("example " + i); });
    if (data.examples.length > 1) {
      select(bar, "example", exTitles, 0, function (v) { state.ex = v; state.side = null; state.sel = null; build(); });
    }
    select(bar, "layer", data.layers.map(function (l) { return "L" + l; }), state.li,
      function (v) { state.li = v; draw(); });
    select(bar, "head", data.heads.map(function (h) { return "H" + h; }), state.hi,
      function (v) { state.hi = v; draw(); });
    var lab = html("label", null, bar);
    var box = html("input", null, lab);
    box.type = "checkbox";
    box.setAttribute("data-role", "hide-trivial");
    html("span", " hide [CLS]/[SEP] and punctuation", lab);
    box.addEventListener("change", function () { state.hide = box.checked; draw(); });
    var hint = html("span", "click a token to see only its lines; click again for all", bar);
    hint.className = "phv-hint";
    var sentence = html("div", null, root);
    sentence.className = "phv-sentence";
    var holder = html("div", null, root);
    var lines, left, right, ex;
    var rowH = 18, colW = 150, gap = 160;

    function build() {
      ex = data.examples[state.ex];
      while (holder.firstChild) holder.removeChild(holder.firstChild);
      sentence.textContent = ex.text || "";
      var keys = ex.tokens, queries = ex.query_tokens || ex.tokens;
      var n = Math.max(keys.length, queries.length);
      var width = colW * 2 + gap, height = n * rowH + 10;
      var canvas = svg("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height,
        "class": "phv-svg", role: "img"}, holder);
      lines = svg("g", {}, canvas);
      left = []; right = [];
      function label(x, y, text, anchor, side, i) {
        var e = svg("text", {x: x, y: y, "text-anchor": anchor, "class": "phv-tok", "data-side": side,
          "data-index": i}, canvas);
        e.textContent = String(text);
        e.addEventListener("click", function () {
          if (state.side === side && state.sel === i) { state.side = null; state.sel = null; }
          else { state.side = side; state.sel = i; }
          draw();
        });
        return e;
      }
      queries.forEach(function (tok, i) { left.push(label(colW - 6, 14 + i * rowH, tok, "end", "q", i)); });
      keys.forEach(function (tok, j) { right.push(label(colW + gap + 6, 14 + j * rowH, tok, "start", "k", j)); });
      draw();
    }

    function trivial(i) { return state.hide && ex.trivial && ex.trivial[i]; }

    function draw() {
      while (lines.firstChild) lines.removeChild(lines.firstChild);
      var count = 0, nH = data.heads.length;
      for (var i = 0; i < ex.nq; i++) {
        if (state.side === "q" && state.sel !== i) continue;
        if (!ex.query_tokens && trivial(i)) continue;
        for (var j = 0; j < ex.nk; j++) {
          if (state.side === "k" && state.sel !== j) continue;
          if (trivial(j)) continue;
          var w = weight(ex, nH, state.li, state.hi, i, j);
          if (w < MIN_WEIGHT) continue;
          svg("line", {x1: colW, y1: 10 + i * rowH, x2: colW + gap, y2: 10 + j * rowH,
            stroke: data.accent || "#4c72b0",
            "stroke-width": (0.5 + 5 * w).toFixed(2), "stroke-opacity": Math.min(1, 0.15 + w).toFixed(2),
            "class": "phv-line"}, lines);
          count++;
        }
      }
      left.forEach(function (e, i) {
        e.setAttribute("class", "phv-tok" + (state.side === "q" && state.sel === i ? " phv-on" : "") +
          (!ex.query_tokens && trivial(i) ? " phv-dim" : ""));
      });
      right.forEach(function (e, j) {
        e.setAttribute("class", "phv-tok" + (state.side === "k" && state.sel === j ? " phv-on" : "") +
          (trivial(j) ? " phv-dim" : ""));
      });
      root.setAttribute("data-example", String(state.ex));
      root.setAttribute("data-layer", String(data.layers[state.li]));
      root.setAttribute("data-head", String(data.heads[state.hi]));
      root.setAttribute("data-selected", state.sel === null ? "" : state.side + state.sel);
      root.setAttribute("data-lines", String(count));
    }
    build();
  }

  function hexToRgb(h) {
    return [parseInt(h.substr(1, 2), 16), parseInt(h.substr(3, 2), 16), parseInt(h.substr(5, 2), 16)];
  }

  function mountModel(root, data) {
    var state = {ex: 0};
    var lut = data.cmap.map(hexToRgb);
    var bar = html("div", null, root);
    bar.className = "phv-bar";
    if (data.examples.length > 1) {
      select(bar, "example", data.examples.map(function (e, i) { return e.title || ("example " + i); }), 0,
        function (v) { state.ex = v; draw(); });
    }
    var hint = html("span", "each square: one head's attention (rows: queries, columns: keys); click to open the head",
      bar);
    hint.className = "phv-hint";
    var sentence = html("div", null, root);
    sentence.className = "phv-sentence";
    var grid = html("div", null, root);
    grid.className = "pmv-grid";
    grid.style.gridTemplateColumns = "28px repeat(" + data.heads.length + ", 76px)";
    var canvases = [];
    html("span", "", grid);
    data.heads.forEach(function (h) { var s = html("span", "H" + h, grid); s.className = "pmv-cell"; });
    data.layers.forEach(function (layer, li) {
      var s = html("span", "L" + layer, grid);
      s.className = "pmv-cell";
      s.style.alignSelf = "center";
      data.heads.forEach(function (head, hi) {
        var a = html("a", null, grid);
        a.className = "pmv-cell pmv-thumb";
        a.href = data.href.replace("{layer}", String(layer)).replace("{head}", String(head));
        a.title = "layer " + layer + ", head " + head;
        a.setAttribute("data-layer", String(layer));
        a.setAttribute("data-head", String(head));
        var c = html("canvas", null, a);
        canvases.push({c: c, li: li, hi: hi});
      });
    });

    function draw() {
      var ex = data.examples[state.ex], nH = data.heads.length;
      sentence.textContent = ex.text || "";
      var bytes = decode(ex);
      canvases.forEach(function (t) {
        t.c.width = ex.nk; t.c.height = ex.nq;
        var ctx = t.c.getContext("2d"), img = ctx.createImageData(ex.nk, ex.nq);
        var base = (t.li * nH + t.hi) * ex.nq * ex.nk;
        for (var p = 0; p < ex.nq * ex.nk; p++) {
          var rgb = lut[Math.min(lut.length - 1, Math.floor(bytes[base + p] / 256 * lut.length))];
          img.data[4 * p] = rgb[0]; img.data[4 * p + 1] = rgb[1]; img.data[4 * p + 2] = rgb[2];
          img.data[4 * p + 3] = 255;
        }
        ctx.putImageData(img, 0, 0);
      });
      root.setAttribute("data-example", String(state.ex));
      root.setAttribute("data-thumbs", String(canvases.length));
    }
    draw();
  }

  function mountAll() {
    var kinds = [["[data-probe-head-view]", mountHead], ["[data-probe-model-view]", mountModel]];
    kinds.forEach(function (kind) {
      var roots = document.querySelectorAll(kind[0]);
      for (var r = 0; r < roots.length; r++) {
        var root = roots[r];
        if (root.getAttribute("data-mounted")) continue;
        var src = root.querySelector("script[type='application/json']");
        if (!src) continue;
        root.setAttribute("data-mounted", "1");
        var data = JSON.parse(src.textContent);
        var shared = root.getAttribute("data-source");  // panes sharing one blob of examples
        if (shared) data.examples = JSON.parse(document.getElementById(shared).textContent).examples;
        kind[1](root, data);
      }
    });
  }

  window.ProbeViews = {mountAll: mountAll};
  window.ProbeHeadView = window.ProbeViews;
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
  else mountAll();
})();
