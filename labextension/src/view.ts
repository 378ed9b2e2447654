/**
 * The autocomp result view: the live widget when its model exists, the static
 * HTML when it does not.
 *
 * `%%autocomp` outputs carry three MIME types:
 *   - `application/vnd.autocomp.view+json`: `{model_id, version_major, version_minor}`
 *     of the ipywidgets view (the same payload as a widget view);
 *   - `text/html`: every tab's content as static HTML/SVG;
 *   - `text/plain`: one line.
 * nbconvert, GitHub and VS Code do not know the first type and show `text/html`.
 * JupyterLab with this extension renders the first type with the renderer below:
 * it shows the static HTML at once, renders the widget view through the
 * notebook's own ipywidgets renderer (hidden), and swaps to the widget as soon
 * as the view exists. When the widget manager reports the model missing (a
 * reopened notebook, a new kernel) the static HTML simply stays: no
 * "Error displaying widget: model not found".
 */
import { IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Panel, Widget } from '@lumino/widgets';

export const VIEW_MIME = 'application/vnd.autocomp.view+json';
export const WIDGET_VIEW_MIME = 'application/vnd.jupyter.widget-view+json';
export const HTML_MIME = 'text/html';
/** Ahead of the ipywidgets view (-10) and of text/html. */
export const VIEW_RANK = -20;

/** Where the renderer stands: static HTML shown, live widget shown, or no live view possible. */
export type ViewState = 'static' | 'live' | 'static-only';

export class AutocompViewRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(private readonly registry: IRenderMimeRegistry) {
    super();
    this.addClass('autocomp-view');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.disconnect();
    for (const child of [...this.widgets]) {
      child.dispose();
    }
    this.staticView = null;
    this.liveView = null;
    const html = model.data[HTML_MIME];
    if (typeof html === 'string' && this.registry.getFactory(HTML_MIME)) {
      this.staticView = this.registry.createRenderer(HTML_MIME);
      this.staticView.addClass('autocomp-view-static');
      this.addWidget(this.staticView);
      await this.staticView.renderModel(
        new MimeModel({ data: { [HTML_MIME]: html }, trusted: model.trusted, metadata: model.metadata })
      );
    }
    const source = model.data[VIEW_MIME] as { model_id?: string } | undefined;
    if (!source || !source.model_id || !this.registry.getFactory(WIDGET_VIEW_MIME)) {
      this.setState('static-only');
      return;
    }
    const live = this.registry.createRenderer(WIDGET_VIEW_MIME);
    live.addClass('autocomp-view-live');
    live.hide();
    this.addWidget(live);
    this.liveView = live;
    // The ipywidgets renderer adds the view as a child widget once the model is
    // found, or writes an error text when the restored manager has no such model.
    this.observer = new MutationObserver(() => this.check());
    this.observer.observe(live.node, { childList: true, characterData: true, subtree: false });
    this.setState('static');
    await live.renderModel(
      new MimeModel({ data: { [WIDGET_VIEW_MIME]: source }, trusted: model.trusted, metadata: model.metadata })
    );
    this.check();
  }

  dispose(): void {
    this.disconnect();
    super.dispose();
  }

  private check(): void {
    const live = this.liveView;
    if (!live || live.isDisposed) {
      return;
    }
    const children = (live as Panel).widgets;
    if (children && children.length > 0) {
      live.show();
      this.staticView?.hide();
      this.setState('live');
    } else if ((live.node.textContent || '').startsWith('Error displaying widget')) {
      // The model is gone for good (reopened notebook, new kernel): the static view stays.
      this.disconnect();
      live.dispose();
      this.liveView = null;
      this.staticView?.show();
      this.setState('static-only');
    } else {
      live.hide();
      this.staticView?.show();
      this.setState('static');
    }
  }

  private setState(state: ViewState): void {
    this.node.dataset.autocompView = state;
  }

  private disconnect(): void {
    this.observer?.disconnect();
    this.observer = null;
  }

  private staticView: IRenderMime.IRenderer | null = null;
  private liveView: Widget | null = null;
  private observer: MutationObserver | null = null;
}

/** A renderer factory bound to one rendermime registry (a notebook's, or the app's). */
export function viewRendererFactory(registry: IRenderMimeRegistry): IRenderMime.IRendererFactory {
  return {
    safe: false,
    mimeTypes: [VIEW_MIME],
    defaultRank: VIEW_RANK,
    createRenderer: () => new AutocompViewRenderer(registry)
  };
}
