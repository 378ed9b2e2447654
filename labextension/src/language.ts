/**
 * The `autocomp` CodeMirror language for `.acir` files: a StreamLanguage that
 * replays the tokenizer's spans as standard highlight tags, so every
 * JupyterLab theme colours it without extra CSS.
 */
import {
  LanguageSupport,
  StreamLanguage,
  StringStream
} from '@codemirror/language';

import { Token, TokenType, tokenizeLine } from './tokenizer';

/**
 * Token type → CodeMirror highlight tag names (@lezer/highlight `tags`),
 * chosen among those JupyterLab's highlight style colours.
 */
const TAGS: Record<TokenType, string> = {
  magic: 'meta',
  flag: 'attributeName',
  'flag-value': 'string',
  comment: 'lineComment',
  keyword: 'keyword',
  op: 'variableName.function.definition',
  function: 'variableName.standard',
  dtype: 'atom',
  index: 'variableName.special',
  attribute: 'propertyName',
  number: 'number',
  operator: 'operator'
};

interface ILineCache {
  line: string;
  tokens: Token[];
}

export const autocompLanguage = StreamLanguage.define<ILineCache>({
  name: 'autocomp',
  startState: () => ({ line: '', tokens: [] }),
  token(stream: StringStream, cache: ILineCache): string | null {
    if (cache.line !== stream.string || stream.sol()) {
      cache.line = stream.string;
      cache.tokens = tokenizeLine(stream.string);
    }
    const token = cache.tokens.find(([, end]) => end > stream.pos);
    if (token === undefined) {
      stream.skipToEnd();
      return null;
    }
    const [start, end, type] = token;
    if (start > stream.pos) {
      stream.pos = start;
      return null;
    }
    stream.pos = end;
    return TAGS[type];
  },
  copyState: cache => ({ line: cache.line, tokens: cache.tokens }),
  languageData: { commentTokens: { line: '#' } }
});

export function autocompLanguageSupport(): LanguageSupport {
  return new LanguageSupport(autocompLanguage);
}
