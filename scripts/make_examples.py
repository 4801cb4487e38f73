"""Generate the binary and non-UTF-8 files of examples/handbook/ (the rest is written by hand).

    pip install fpdf2          # dev-only (pyproject: [project.optional-dependencies] dev)
    python scripts/make_examples.py [--out examples/handbook]

Writes, deterministically (fixed dates and ids, fixed zip timestamps), so that running it
again yields the same bytes:

    it/security-guide.pdf            5 pages, a Unicode font, page 3 a drawing with no text
                                     layer, page 5 in Portuguese with a hyphenated line end
    purchasing/purchase-orders.docx  Title, Heading 1-2, tables (PO-2231), no core title
    people/onboarding.docx           core title, headings, a bulleted list, a merged cell
    ti/relatorio-de-incidentes.txt   Windows-1252 ("Relatório", "€", "–")
    people/benefits.htm              Windows-1252, declared by <meta charset>

The PDF needs a TrueType font with accents: DejaVu Sans (`apt-get install fonts-dejavu-core`),
or pass --font.
"""

from __future__ import annotations

import argparse
import io
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import docx
from docx.enum.text import WD_BREAK
from fpdf import FPDF

ROOT = Path(__file__).resolve().parent.parent
FIXED_TIME = datetime(2024, 3, 1, 9, 0, 0, tzinfo=UTC)
ZIP_TIME = (2024, 3, 1, 9, 0, 0)
FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/dejavu"))

SECURITY_PAGES = [
    (
        "Security guide",
        "Passwords and multi-factor authentication",
        "Every account you use for work is protected by a password and a second factor. "
        "Passwords are at least 14 characters long; a passphrase of four or five unrelated "
        "words is easier to remember and harder to guess than a short password full of "
        "symbols. Never reuse a work password anywhere else, and keep all of them in the "
        "company password manager, which IT installs on every laptop. The password manager "
        "also warns you when a password of yours appears in a known breach.\n\n"
        "The second factor is the authenticator app on your phone or a hardware security "
        "key; text messages are not accepted, because phone numbers can be hijacked. Keep "
        "the recovery codes the app gives you in the password manager. If you lose your "
        "phone or your key, tell IT the same day: they revoke the lost device and help you "
        "enrol a new one, which takes about ten minutes with a video call to confirm who "
        "you are.",
    ),
    (
        None,
        "Laptops and disk encryption",
        "Company laptops are encrypted (FileVault on macOS, BitLocker on Windows, LUKS on "
        "Linux) before they are handed over, and the recovery keys are escrowed with IT. "
        "Lock the screen whenever you walk away, even in the office; the screen locks by "
        "itself after five minutes. Do not disable the disk encryption, the firewall or the "
        "endpoint protection agent, and install software only from the company software "
        "centre or from the official package repositories of your Linux distribution.\n\n"
        "Updates are installed automatically; a laptop that has not reported to the "
        "management server for 30 days is locked out of the network until it is updated. "
        "When you travel, keep the laptop with you rather than in checked luggage, and use "
        "a privacy screen in trains and planes. A lost or stolen laptop must be reported to "
        "IT within 24 hours, so that it can be wiped remotely.",
    ),
    (None, None, None),  # a page with a drawing only: no text layer
    (
        None,
        "Phishing and reporting incidents",
        "Most attacks start with an e-mail that asks you to click, to open an attachment or "
        "to approve a sign-in you did not start. Be suspicious of urgency, of unexpected "
        "invoices, of messages that claim to come from a director and of any request to "
        "change bank details. Check the sender's address, hover over links before you click "
        "them, and when in doubt ask the supposed sender through another channel.\n\n"
        "Report anything suspicious with the Report phishing button in the mail client, or "
        "by writing to security@lumen.example. If you clicked a link or typed your password "
        "into a page you now distrust, say so at once: change the password, and call the IT "
        "hotline on extension 4357. Nobody is blamed for reporting a mistake quickly; the "
        "damage comes from mistakes that are hidden.",
    ),
    (
        None,
        "Autenticação na VPN (Lisboa)",
        # Lines are laid out by hand: "autenti-" ends a line, "cação" starts the next.
        "Para aceder à rede interna a partir de casa é necessária a autenti-\n"
        "cação com o utilizador da rede e com o segundo fator (aplicação\n"
        "de autenticação ou chave de segurança). Instale o cliente da VPN\n"
        "a partir do centro de software e escolha o perfil «Lisboa».\n\n"
        "Se a ligação falhar com o erro «certificado inválido», confirme\n"
        "que a data e a hora do portátil estão corretas. Para a configuração\n"
        "do proxy depois de ligado, consulte a página do proxy da equipa de TI.",
    ),
]

PO_ROWS = [
    ("PO number", "Supplier", "Item", "Amount", "Status"),
    ("PO-2207", "Tecnoprint Lda", "Office printer toner, 40 cartridges", "€2,360", "Delivered"),
    ("PO-2219", "Azure (Microsoft)", "Cloud credits, Q2", "€45,000", "Approved"),
    ("PO-2231", "Dell Technologies", "14 Latitude 7450 laptops", "€18,900", "Awaiting delivery"),
    ("PO-2240", "Mobiliário Silva", "6 standing desks, São Paulo office", "R$31,200", "Ordered"),
]

REPORT_1252 = """\
Relatório mensal de incidentes – março de 2024
Equipa de TI de Lisboa

Resumo

Em março registámos 23 incidentes, menos 4 do que em fevereiro. Dezanove
foram resolvidos no próprio dia; o tempo médio de resolução foi de 3 h 20 min.
O custo estimado das interrupções foi de 1 850 €, quase todo devido à falha
do proxy no dia 12.

Incidentes principais

12/03 – Falha do proxy corporativo durante 47 minutos, entre as 9h10 e as
9h57. A causa foi um certificado expirado no balanceador de carga. Foi
renovado e criámos um alerta que avisa 30 dias antes da expiração.

19/03 – Três portáteis com a encriptação do disco desativada foram
detetados pelo inventário. Os utilizadores foram contactados e a
encriptação foi reativada no mesmo dia.

27/03 – O nó gpu-17 do cluster reportou um erro de hardware e foi retirado
de serviço; a placa foi substituída ao abrigo da garantia.

Ações para abril

– Rever os certificados de todos os serviços internos.
– Formação sobre «phishing» para as equipas comerciais.
– Publicar a nova versão da página de configuração do proxy.
"""

BENEFITS_1252 = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="windows-1252">
<title>Benefits</title>
</head>
<body>
<nav><a href="/">Intranet</a> › <a href="/people/">People</a></nav>
<h1>Benefits</h1>
<p>Owner: People team. Everything Lumen offers on top of your salary, in both
offices. Amounts are per employee and are reviewed every January.</p>
<h2>Health insurance</h2>
<p>Health insurance covers you from your first day, and your partner and children
at no extra cost. In Portugal the insurer is Médis; in Brazil, SulAmérica. The
plan includes dental care and one pair of glasses every two years. You’ll find
your card and the list of clinics in the HR portal, under “Benefits”.</p>
<h2>Meal allowance</h2>
<p>Every working day earns a meal allowance of €9.60 in Portugal or R$45 in
Brazil, paid on a meal card rather than with the salary, which keeps it free of
income tax up to the legal limit.</p>
<h2>Learning budget</h2>
<p>Each person has €1,000 a year for courses, books and conferences related to
their work, and five days of paid study leave. Ask your manager before you spend
it; unused budget does not carry over.</p>
<h2>Equipment for working from home</h2>
<p>A one-off allowance of €500 pays for a desk, a chair or a screen; the company
laptop, headset and keyboard are provided separately by IT.</p>
<footer>© Lumen Analytics – People team</footer>
</body>
</html>
"""


def find_font(explicit: Path | None) -> tuple[Path, Path]:
    """The regular and bold TrueType files for the PDF (DejaVu Sans unless given)."""
    if explicit:
        return explicit, explicit
    for folder in FONT_DIRS:
        regular, bold = folder / "DejaVuSans.ttf", folder / "DejaVuSans-Bold.ttf"
        if regular.exists():
            return regular, bold if bold.exists() else regular
    raise SystemExit("no DejaVu Sans font: apt-get install fonts-dejavu-core, or pass --font")


def security_guide(font: tuple[Path, Path]) -> bytes:
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_TIME)
    pdf.set_title("Security guide")
    pdf.set_author("Lumen Analytics, IT security")
    pdf.set_creator("scripts/make_examples.py")
    pdf.set_producer("fpdf2")
    pdf.add_font("Body", "", str(font[0]))
    pdf.add_font("Body", "B", str(font[1]))
    pdf.set_auto_page_break(auto=True, margin=20)
    for title, heading, body in SECURITY_PAGES:
        pdf.add_page()
        if heading is None:  # the drawing: shapes only, no text layer
            pdf.set_draw_color(40, 80, 160)
            pdf.set_line_width(1.2)
            pdf.rect(40, 60, 130, 80)
            pdf.line(40, 60, 170, 140)
            pdf.line(40, 140, 170, 60)
            pdf.ellipse(85, 170, 40, 40)
            continue
        if title:
            pdf.set_font("Body", "B", 22)
            pdf.cell(0, 14, title, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
        pdf.set_font("Body", "B", 15)
        pdf.cell(0, 10, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
        pdf.set_font("Body", "", 11)
        for paragraph in body.split("\n\n"):
            pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
    return bytes(pdf.output())


def purchase_orders() -> bytes:
    word = docx.Document()
    word.add_paragraph("Purchasing guide", style="Title")
    word.add_paragraph(
        "Owner: Finance team. How to buy what you need for your work, from a box of pens to "
        "a rack of servers, and how to follow an order until it is delivered."
    )
    word.add_heading("Purchase orders", level=1)
    word.add_paragraph(
        "Anything that costs more than €500, and any service with a contract, is bought with "
        "a purchase order (PO). Create the request in the finance portal under Purchasing → "
        "New request: describe what you need and why, attach the supplier's quote, and choose "
        "the budget line it is paid from. The portal gives the request a number of the form "
        "PO-NNNN as soon as it is approved; quote that number in every message to the "
        "supplier and to Finance. Suppliers are told to put the PO number on their invoice, "
        "and invoices without one are sent back, which delays payment by weeks. Goods are "
        "delivered to the office reception, which checks each parcel against the PO and "
        "marks the order as delivered in the portal; for services, the person who asked for "
        "them confirms delivery. Only then is the invoice paid, within 30 days."
    )
    word.add_heading("Approval limits", level=2)
    limits = word.add_table(rows=1, cols=2)
    limits.rows[0].cells[0].text = "Amount (without VAT)"
    limits.rows[0].cells[1].text = "Approved by"
    for amount, approver in (
        ("Up to €5,000", "Your manager"),
        ("€5,000 to €50,000", "Your director and Finance"),
        ("Over €50,000", "The CFO, after three competing quotes"),
    ):
        row = limits.add_row().cells
        row[0].text, row[1].text = amount, approver
    word.add_heading("Open purchase orders", level=2)
    word.add_paragraph("Orders placed this quarter and their status at the end of February:")
    orders = word.add_table(rows=0, cols=len(PO_ROWS[0]))
    for values in PO_ROWS:
        cells = orders.add_row().cells
        for cell, value in zip(cells, values, strict=True):
            cell.text = value
    word.add_paragraph(
        "PO-2231 is late: Dell moved the delivery of the laptops to the week of 18 March. "
        "The new starters of March get loan laptops from IT in the meantime."
    )
    word.add_heading("Suppliers", level=1)
    word.add_paragraph(
        "Buy from a supplier on the approved list whenever one offers what you need. To add a "
        "supplier, send Finance its company registration, its bank details on letterhead and "
        "the answers to the supplier questionnaire; checks take about a week."
    )
    return _save(word)


def onboarding() -> bytes:
    word = docx.Document()
    word.core_properties.title = "Onboarding checklist"
    word.add_heading("Before your first day", level=1)
    word.add_paragraph(
        "Your manager sends you a welcome message a week before you start, with the time "
        "and place of your first day. IT prepares your laptop and your accounts; the People "
        "team sends the contract, the benefits forms and the code of conduct to sign."
    )
    word.add_heading("Your first week", level=1)
    word.add_heading("Day one", level=2)
    for item in (
        "Collect your laptop and badge at the reception.",
        "Set up the password manager and your second factor with IT.",
        "Lunch with your team; the company pays.",
    ):
        word.add_paragraph(item, style="List Bullet")
    word.add_heading("Days two to five", level=2)
    paragraph = word.add_paragraph("Read the handbook, starting with the leave policy.")
    paragraph.add_run().add_break(WD_BREAK.LINE)
    paragraph.add_run("Meet your onboarding buddy every day at 16:00.")
    word.add_heading("Who to ask", level=1)
    people = word.add_table(rows=3, cols=3)
    people.cell(0, 0).merge(people.cell(0, 2)).text = "Contacts for your first month"
    for row, values in enumerate(
        (("IT", "Rui Almeida", "ext. 4357"), ("People", "Marta Costa", "people@lumen.example")),
        start=1,
    ):
        for column, value in enumerate(values):
            people.cell(row, column).text = value
    return _save(word)


def _save(word: docx.document.Document) -> bytes:
    """Save with fixed core properties and fixed zip timestamps, so the bytes never vary."""
    properties = word.core_properties
    properties.author = properties.last_modified_by = "Lumen Analytics"
    properties.created = properties.modified = FIXED_TIME.replace(tzinfo=None)
    properties.revision = 1
    buffer = io.BytesIO()
    word.save(buffer)
    return fixed_zip(buffer.getvalue())


def fixed_zip(data: bytes) -> bytes:
    """The same zip with every member's timestamp set to ZIP_TIME."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            fixed = zipfile.ZipInfo(member.filename, date_time=ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            target.writestr(fixed, source.read(member))
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "examples" / "handbook")
    parser.add_argument("--font", type=Path, help="a TrueType font with accents")
    args = parser.parse_args()
    files = {
        "it/security-guide.pdf": security_guide(find_font(args.font)),
        "purchasing/purchase-orders.docx": purchase_orders(),
        "people/onboarding.docx": onboarding(),
        "ti/relatorio-de-incidentes.txt": REPORT_1252.replace("\n", "\r\n").encode("cp1252"),
        "people/benefits.htm": BENEFITS_1252.encode("cp1252"),
    }
    for relative, data in files.items():
        path = args.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(
            f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  {len(data):,} bytes"
        )


if __name__ == "__main__":
    main()
