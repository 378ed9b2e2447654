/**
 * CodeMirror 6 view plugin that marks autocomp DSL tokens in an editor whose
 * first line is `%%autocomp`. Other editors get no decorations at all.
 */
import { Extension, Prec, RangeSetBuilder } from '@codemirror/state';
import {
  Decoration,
  DecorationSet,
  EditorView,
  ViewPlugin,
  ViewUpdate
} from '@codemirror/view';

import { isAutocompCell, Token, TokenType, tokenizeLine } from './tokenizer';

/** Class on every highlighted span; `cm-autocomp-<type>` names its kind. */
export const TOKEN_CLASS = 'cm-autocomp';

const marks = new Map<TokenType, Decoration>();

function markFor(type: TokenType): Decoration {
  let mark = marks.get(type);
  if (mark === undefined) {
    mark = Decoration.mark({ class: `${TOKEN_CLASS} ${TOKEN_CLASS}-${type}` });
    marks.set(type, mark);
  }
  return mark;
}

function isAutocompDoc(view: EditorView): boolean {
  const doc = view.state.doc;
  return doc.lines > 0 && isAutocompCell(doc.line(1).text);
}

function buildDecorations(view: EditorView): DecorationSet {
  if (!isAutocompDoc(view)) {
    return Decoration.none;
  }
  const builder = new RangeSetBuilder<Decoration>();
  const doc = view.state.doc;
  for (const { from, to } of view.visibleRanges) {
    let line = doc.lineAt(from);
    for (;;) {
      const tokens: Token[] = tokenizeLine(line.text);
      for (const [start, end, type] of tokens) {
        builder.add(line.from + start, line.from + end, markFor(type));
      }
      if (line.to >= to || line.number >= doc.lines) {
        break;
      }
      line = doc.line(line.number + 1);
    }
  }
  return builder.finish();
}

/**
 * The editor extension: decorations recomputed on edits and scrolling.
 * Lowest precedence makes CodeMirror draw each DSL span outside the Python
 * highlighter's spans (higher-precedence marks nest inside), so one token,
 * e.g. `max=`, is one `cm-autocomp-*` element instead of being split.
 */
export function autocompCellHighlighter(): Extension {
  const plugin = ViewPlugin.fromClass(
    class {
      decorations: DecorationSet;

      constructor(view: EditorView) {
        this.decorations = buildDecorations(view);
      }

      update(update: ViewUpdate) {
        if (update.docChanged || update.viewportChanged) {
          this.decorations = buildDecorations(update.view);
        }
      }
    },
    { decorations: value => value.decorations }
  );
  return Prec.lowest(plugin);
}
